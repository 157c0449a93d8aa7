"""The regression gate (``run_eval.py gate`` and ``gate-speed``): is a candidate run worse than a baseline beyond
tolerance and beyond noise?

``checks`` runs the four checks and decides; ``drift`` finds changed token ids, ``power`` the smallest drop a test can
show, ``retiming`` re-times a finished run against a fixed reference decoder; ``verdict`` holds the decisions as
records and ``output`` the command's options and printed table.
"""
