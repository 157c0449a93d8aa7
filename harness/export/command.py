"""``run_eval.py export RUN --format lm-eval [--output DIR]``: a finished run's results in another tool's layout."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

from harness.errors import OneLineParser, UsageError, UserError, one_line_failure

FORMATS = ("lm-eval",)
DEFAULT_FOLDER = "lm-eval"  # RUN/lm-eval/<model>/ unless --output says otherwise


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run_eval.py export",
                description="Write a finished run's results and samples in lm-eval's layout (results_<time>.json and "
                            "samples_<task>_<time>.jsonl per model), for the tools that read lm-eval's output.")
    p.add_argument("run", type=Path, metavar="RUN", help="a run folder (or its results JSON file)")
    p.add_argument("--format", required=True, metavar="FORMAT", help=f"the layout: {', '.join(FORMATS)}")
    p.add_argument("--output", type=Path, help=f"folder for the files (default: RUN/{DEFAULT_FOLDER})")
    return p


def main_export(argv: list[str]) -> int:
    """Write the export; 0 on success, 2 with one line on stderr on bad input."""
    from harness.run.folder import load_run

    try:
        args = build_parser().parse_args(argv)
        if args.format not in FORMATS:
            raise UsageError(f"unknown format {args.format}; valid formats: {', '.join(FORMATS)}")
        run = load_run(args.run)
        if not run.results:
            raise UsageError(f"{args.run} holds no finished results yet; nothing to export")
        from harness.export.lm_eval_layout import export_run

        written = export_run(run, args.output or run.root / DEFAULT_FOLDER, datetime.now())
    except (SystemExit, UserError, OSError) as failure:
        return one_line_failure("export", failure, "the export")
    for model in written:
        print(f"{model.model}: {model.results}" + "".join(f"\n  {path}" for path in model.samples.values()))
    return 0
