"""The options of ``run_eval.py sweep``: the run's options plus grids, a reference and a significance level.

The command itself lives in harness.cli, the one place that both runs and reports (a sweep ends with its frontier).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import OneLineParser
from harness.sweep.plan import DEFAULT_PROMPTS, DEFAULT_REPEATS

EPILOG = """\
Each point is one model with one value of each of its gridded options at one batch size: the Cartesian product of
the grids that apply to that model (MODEL.OPTION grids, bare OPTION grids for every model, and batch_size for all).
A point runs as a normal resumable run into DIR/<model>__<option>=<value>...__batch_size=<N>/; points of one batch
size share the store DIR/store/batch_size=<N>/, so points whose configurations are equal after resolution generate
once, and rerunning the same command resumes an interrupted sweep (finished points are skipped).

The reference of each model (--reference MODEL.OPTION=VALUE,...,batch_size=N; default: the model's default settings
at the run's --batch-size, or the first gridded batch size) is compared with every point of that model by an exact
McNemar test on paired items, Holm-corrected over the model's points per task. It is run too when it is off the grid.
Once every point has generated, the sweep re-times them: --repeats passes (default 6), each decoding the first
--timing-prompts stored prompts of every point, round-robin over the points and alternating direction, written to
DIR/sweep_timing.json. Speed-ups and crossovers are medians of pass-by-pass ratios with a 95% interval; where the
interval includes 1 the frontier says "within noise" instead. Accuracy and tokens come from the one generation.
The sweep ends by writing DIR/frontier.html, DIR/frontier.csv and DIR/frontier_crossovers.csv.

Example: run_eval.py sweep --models tiny-refusion --tasks gsm8k --data fixtures --limit 8 --gen-length 32
    --grid tiny-refusion.slot_threshold=0.9,0.5 --grid batch_size=1,4 --output runs/sweep
"""


def build_sweep_parser(run: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The sweep's parser over ``run``, the run's parser (its options are the sweep's too)."""
    p = OneLineParser(prog="run_eval.py sweep", parents=[run], add_help=False, conflict_handler="resolve",
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
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                   help="interleaved timing passes over every point (default %(default)s, the fewest that give a 95%% "
                        "interval; 1: no re-timing, speed-ups untested against noise)")
    p.add_argument("--timing-prompts", type=int, default=DEFAULT_PROMPTS,
                   help="stored prompts per task each timing pass decodes (default %(default)s; at least the largest "
                        "batch size)")
    p.add_argument("--output", type=Path, help="sweep folder (default: runs/sweep+<models>__<tasks>; rerunning resumes it)")
    return p


def list_sweep(registry: str) -> str:
    """``registry`` (the run's --list text) and the axes a sweep can grid."""
    return (registry + "\nsweep axes: --grid MODEL.OPTION=V1,V2 for any decoding option above (or gen_length, "
            "a per-model canvas), --grid OPTION=... for every model, --grid batch_size=1,4,16")
