"""The speed/quality frontier of a sweep: ``frame`` builds its tables from a sweep folder, ``page`` draws
``frontier.html`` and writes the CSV files. ``frontier_frame(sweep_folder)`` is the Python entry point the docs name."""

from reports.frontier.frame import build_frontier, frontier_frame

__all__ = ["build_frontier", "frontier_frame"]
