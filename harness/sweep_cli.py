"""``run_eval.py sweep``: run a grid of decoding settings and batch sizes, then write the speed/quality frontier."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn, Sequence

from harness.cli import UsageError, build_parser, list_registry, quiet_libraries, settings_from_args

EPILOG = """\
Each point is one model with one value of each of its gridded options at one batch size: the Cartesian product of
the grids that apply to that model (MODEL.OPTION grids, bare OPTION grids for every model, and batch_size for all).
A point runs as a normal resumable run into DIR/<model>__<option>=<value>...__batch_size=<N>/; points of one batch
size share the store DIR/store/batch_size=<N>/, so points whose configurations are equal after resolution generate
once, and rerunning the same command resumes an interrupted sweep (finished points are skipped).

The reference of each model (--reference MODEL.OPTION=VALUE,...,batch_size=N; default: the model's default settings
at the run's --batch-size, or the first gridded batch size) is compared with every point of that model by an exact
McNemar test on paired items, Holm-corrected over the model's points per task. It is run too when it is off the grid.
The sweep ends by writing DIR/frontier.html, DIR/frontier.csv and DIR/frontier_crossovers.csv.

Example: run_eval.py sweep --models tiny-refusion --tasks gsm8k --data fixtures --limit 8 --gen-length 32
    --grid tiny-refusion.slot_threshold=0.9,0.5 --grid batch_size=1,4 --output runs/sweep
"""


class _SweepParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(message)


def build_sweep_parser() -> argparse.ArgumentParser:
    run = build_parser()
    p = _SweepParser(prog="run_eval.py sweep", parents=[run], add_help=False, conflict_handler="resolve",
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
                     description="Sweep decoding options and batch sizes; chart accuracy against tokens/s.")
    p.add_argument("-h", "--help", action="help", help="show this help and exit")
    p.add_argument("--list", action="store_true", help="list models, their options and tasks, then exit")
    p.add_argument("--grid", action="append", default=[], metavar="MODEL.OPTION=V1,V2,...",
                   help="values to sweep for one option (repeatable); bare OPTION=... for every model, "
                        "batch_size=1,4,16 for the batch size")
    p.add_argument("--reference", action="append", default=[], metavar="MODEL.OPTION=V,...",
                   help="the point each model's points are tested against (default: the model's defaults)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the Holm-corrected tests")
    p.add_argument("--output", type=Path, help="sweep folder (default: runs/sweep+<models>__<tasks>; rerunning resumes it)")
    return p


def list_sweep() -> str:
    return (list_registry() + "\nsweep axes: --grid MODEL.OPTION=V1,V2 for any decoding option above (or gen_length, "
            "a per-model canvas), --grid OPTION=... for every model, --grid batch_size=1,4,16")


def sweep_main(argv: Sequence[str]) -> int:
    from harness import distributed
    from harness.cli import default_output
    from harness.runner import resolve_device
    from harness.sweep import SweepSpec, parse_grids, parse_reference, run_sweep

    try:
        args = build_sweep_parser().parse_args(list(argv))
    except SystemExit as done:  # --help
        return int(done.code or 0)
    if args.list:
        print(list_sweep())
        return 0
    quiet_libraries()
    if not args.grid:
        raise UsageError("give at least one --grid (e.g. --grid tiny-refusion.slot_size=4,8 or --grid batch_size=1,4)")
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha must be between 0 and 1, got {args.alpha}")
    base = settings_from_args(args)
    root = args.output or default_output(("sweep", *base.models), base.tasks)
    spec = SweepSpec(parse_grids(args.grid, base.models), parse_reference(args.reference, base.models), args.alpha)
    ctx = distributed.context_from_env()
    distributed.start(ctx, resolve_device(base.device, ctx.local_rank))
    try:
        run_sweep(spec, base, root, ctx)
    finally:
        distributed.stop(ctx)
    if ctx.is_main:
        print(write_frontier_files(root))
    return 0


def write_frontier_files(root: Path) -> str:
    """The frontier page and tables; a page that fails does not fail the sweep (every point's results are written)."""
    from reports.frontier import build_frontier
    from reports.frontier_page import write_frontier

    try:
        frontier = build_frontier(root)
        html = write_frontier(root, frontier)
    except (ValueError, OSError) as error:
        return f"frontier not written: {error} (rerun the same sweep command: finished points are skipped)"
    lines = [h.text for h in frontier.headlines] + list(frontier.crossovers["text"]) + list(frontier.notes)
    return "\n".join(lines + [f"frontier: {html} (table: {html.with_suffix('.csv')})"])

