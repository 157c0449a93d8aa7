"""Decoding sweeps (``run_eval.py sweep``): grids of options and batch sizes, each point a normal resumable run.

``arguments`` adds the sweep's options to the run's, ``plan`` holds the points and references and the sweep folder's
layout, ``driver`` runs the points, and ``crossover`` finds where two throughput curves cross. The frontier page is
drawn by ``reports.frontier``.
"""
