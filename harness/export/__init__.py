"""Finished runs written in other tools' layouts (``run_eval.py export``)."""
