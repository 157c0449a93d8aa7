"""``run_eval.py report RUN [RUN ...] [--output DIR] [--baseline MODEL]``: the HTML report from finished runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import OneLineParser, UserError, one_line_failure
from reports.browser import BrowserLimits
from reports.report_data import ReportError


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run_eval.py report", error=ReportError,
                description="Write a self-contained HTML report (plus CSV and Markdown tables) comparing runs.")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folders (or results JSON files)")
    p.add_argument("--output", type=Path,
                   help="folder for report.html and the tables (default: the run folder when there is one run, "
                        "else ./report)")
    p.add_argument("--baseline", metavar="MODEL",
                   help="model the accuracy-throughput scatter is relative to (default: the first autoregressive)")
    p.add_argument("--max-items", type=int, default=BrowserLimits.items_per_task,
                   help="sample-browser items embedded per task (default %(default)s)")
    return p


def default_output(runs: list[Path]) -> Path:
    if len(runs) == 1:
        return runs[0] if runs[0].is_dir() else runs[0].parent
    return Path("report")


def main_report(argv: list[str]) -> int:
    """Write the report; 0 on success, 2 with one line on stderr on bad input."""
    from reports.html import write_report  # matplotlib is imported only when a report is written

    try:
        args = build_parser().parse_args(argv)
        if args.max_items < 0:
            raise ReportError(f"--max-items must be 0 or more, got {args.max_items}")
        output = args.output or default_output(args.runs)
        path = write_report(args.runs, output, args.baseline, BrowserLimits(items_per_task=args.max_items))
    except (SystemExit, UserError, OSError) as failure:
        return one_line_failure("report", failure, "the report")
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main_report(sys.argv[1:]))
