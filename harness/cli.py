"""Command line: ``run_eval.py [run options]``, ``run_eval.py report RUN...``, ``run_eval.py gate ...``,
``run_eval.py gate-speed RUN``, ``run_eval.py export RUN --format lm-eval``, ``run_eval.py sweep ...`` (runs, then
writes its frontier: this is the one module that both runs and reports).

Every mistake a user can make on the command line ends in one line on stderr and exit status 2 (so does a run folder
that another run holds); a run stopped by a full disk ends in one line and exit status 3.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.errors import DISK_FULL, USAGE_ERROR, DiskFull, NothingToScore, UsageError, UserError
from harness.run.presets import SMOKE_CANVAS, SMOKE_PRESET
from harness.run.schedule import CONTINUOUS, SCHEDULES


def split_names(value: str, valid: Sequence[str], kind: str, allow_hf: bool = False) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UsageError(f"{kind} {', '.join(repeated)} given more than once; name each {kind} once")
    if kind == "task" and len(names) == 1:
        from tasks.registry import GROUPS

        if names[0] in GROUPS:
            return GROUPS[names[0]]
    unknown = [n for n in names if n not in valid and not (allow_hf and n.startswith(("hf:", "vllm:", "openai:")))
               and not (kind == "task" and n.startswith("lmeval:"))]
    if unknown or not names:
        extra = (" (or hf:<hub id or local path>, vllm:<hub id or local path>, openai:<base url>[#<served model>])"
                 if allow_hf else "")
        extra += " (or all, dllm-2026, or lmeval:<lm-eval task>)" if kind == "task" else ""
        raise UsageError(f"unknown {kind} {', '.join(unknown) or repr(value)}; valid {kind}s: "
                         f"{', '.join(valid)}{extra}")
    return names


def parse_model_args(items: Sequence[str], models: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``MODEL.KEY=VALUE`` items; a bare ``KEY=VALUE`` applies to every model of the run. Values stay strings:
    ``models.options`` types and checks them against each model's config."""
    out: dict[str, dict[str, Any]] = {m: {} for m in models}
    for item in items:
        target, sep, value = item.partition("=")
        if not sep or not target:
            raise UsageError(f"--model-arg {item!r} is not MODEL.KEY=VALUE (e.g. refusion.slot_size=16)")
        model, dot, key = target.rpartition(".")
        if not dot:
            for m in models:
                out[m][key] = value
        elif model not in out:
            raise UsageError(f"--model-arg {item!r} names model {model!r}, which is not in --models "
                             f"({', '.join(models)})")
        else:
            out[model][key] = value
    return out


def experiment_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings that make two runs of the same models and tasks incomparable (they change what is generated or
    from which data); ``--limit``, ``--samples``, ``--warmup`` and ``--device`` are left out: a rerun with another
    limit or more samples per item resumes (and extends) the same folder."""
    data_dir = str(args.data_dir.resolve()) if args.data_dir is not None else None
    return {"data": args.data, "data_dir": data_dir, "preset": args.preset, "gen_length": args.gen_length,
            "model_args": sorted(args.model_arg), "batch_size": args.batch_size, "seed": args.seed,
            "dtype": args.dtype,
            # rows in flight time requests apart from static batches; at one row the two are the same
            **({"schedule": CONTINUOUS} if args.schedule == CONTINUOUS and args.batch_size > 1 else {})}


def default_output(models: Sequence[str], tasks: Sequence[str], experiment: dict[str, Any] | None = None) -> Path:
    """``runs/<models>__<tasks>__<hash of the experiment settings>``: rerunning the same command resumes its folder,
    and a run with other data, preset, canvas, options, batch size, seed or dtype gets its own."""
    import hashlib
    import json

    from harness.run.store import safe_name

    digest = hashlib.sha256(json.dumps(experiment or {}, sort_keys=True).encode()).hexdigest()[:8]
    name = safe_name("+".join(models) + "__" + "+".join(tasks))[:110]
    return Path("runs") / f"{name}__{digest}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run_eval.py",
        description="Evaluate diffusion and autoregressive language models side by side: accuracy and speed.",
        epilog="Subcommands: `run_eval.py report RUN [RUN ...]`, `run_eval.py gate --baseline B --candidate C`, "
               "`run_eval.py gate-speed RUN`, `run_eval.py export RUN --format lm-eval` and "
               "`run_eval.py sweep --grid MODEL.OPTION=V1,V2 ...` (each has --help).",
    )
    p.add_argument("--list", action="store_true", help="list models and tasks with their defaults, then exit")
    p.add_argument("--models", help="comma-separated model names, hf:/vllm:<hub id or local path>, or "
                                     "openai:<base url>[#<served model>]")
    p.add_argument("--tasks", help="comma-separated task names, all (the paper's seven), dllm-2026 (the 2026 "
                                    "diffusion-LLM papers' benchmarks), or lmeval:<lm-eval task>")
    p.add_argument("--limit", type=int, help="first N items of each task")
    p.add_argument("--samples", type=int, metavar="K",
                   help="generations per item, each with its own seed (default 1, or the preset's for a task): "
                        "avg@K, pass@k and maj@K over them; a larger K extends a stored run")
    p.add_argument("--output", type=Path, help="run folder (default: runs/<models>__<tasks>__<hash of the settings "
                                                "that change outputs>; reruns resume it)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, float16")
    p.add_argument("--batch-size", type=int, default=1,
                   help="rows decoded together: at most this many requests in flight (--schedule continuous), or "
                        "static batches of it")
    p.add_argument("--schedule", choices=SCHEDULES, default=CONTINUOUS,
                   help="continuous (default): a waiting request takes the row of the first to finish, each "
                        "request timed on its own, for the decoders that keep rows in flight (the others say so "
                        "and decode static batches); static: every batch holds its rows until its last finishes")
    p.add_argument("--warmup", type=int, default=1, help="first N samples per model × task left out of speed figures")
    p.add_argument("--data", choices=["auto", "hub", "fixtures"], default="auto",
                   help="where items come from: the hub (auto falls back to bundled fixtures when offline)")
    p.add_argument("--data-dir", type=Path, help="local files in the hub schema, e.g. DIR/gsm8k/test.jsonl")
    p.add_argument("--gen-length", type=int, help="canvas length for every task (default: each task's, 512)")
    p.add_argument("--preset", help="decoding preset: paper (per-task settings from the models' papers), or smoke "
                                    f"(a {SMOKE_CANVAS}-token canvas for every task: a first run in about a minute)")
    p.add_argument("--model-arg", action="append", default=[], metavar="[MODEL.]KEY=VALUE",
                   help="override a decoding option: MODEL.KEY=VALUE for one model (e.g. refusion.slot_size=16), "
                        "a bare KEY=VALUE for every model of the run (repeatable)")
    p.add_argument("--threads", default="auto",
                   help="torch CPU threads: N, or auto (default: $OMP_NUM_THREADS if set, else 1 on the CPU, where "
                        "it measured fastest, and torch's default on a GPU); recorded in the manifest")
    p.add_argument("--rescore", action="store_true", help="recompute scores from stored outputs, generate nothing")
    p.add_argument("--wait", action="store_true",
                   help="if another run is writing the same folder, wait for it to finish (default: exit 2)")
    p.add_argument("--reuse-stale", action="store_true",
                   help="keep stored samples of an older decoder version instead of regenerating them (the manifest "
                        "and the report say so)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def list_registry() -> str:
    from models.registry import MODELS, describe_options
    from tasks.registry import make_task, task_names

    lines = ["models:"]
    width = max(len(name) for name in MODELS)  # the longest name still leaves a space before its ref
    for spec in MODELS.values():
        presets = f"  presets: {', '.join(spec.presets)}" if spec.presets else ""
        lines.append(f"  {spec.name:<{width}} {spec.ref:<38} {spec.description}{presets}")
    lines.append(f"  {'hf:<id or path>':<{width}} any causal LM on the autoregressive adapter")
    lines.append(f"  {'vllm:<id or path>':<{width}} any causal LM served by vLLM (server_python= or DLLM_VLLM_PYTHON, or base_url=)")
    lines.append(f"  {'openai:<url>[#<model>]':<{width}} any model behind an OpenAI-compatible server (chat completions)")
    lines.append("options (--model-arg MODEL.KEY=VALUE; gen_length (int) sets the canvas), defaults of each kind:")
    for kind in dict.fromkeys([*(spec.kind for spec in MODELS.values()), "openai"]):
        lines.append(f"  {kind:<18} " + ", ".join(describe_options(kind)))
    lines.append("tasks:")
    for name in task_names():
        task = make_task(name)
        lines.append(f"  {name:<18} {task.dataset.hub_id:<40} primary {task.primary_metric}, "
                     f"canvas {task.canvas_tokens}")
    lines.append("  lmeval:<task>      any generative lm-eval task, prompted and scored by lm-eval")
    return "\n".join(lines)


def check_data_options(data: str, data_dir: Path | None) -> None:
    """``--data-dir`` replaces the item source, so beside an explicit ``--data hub`` or ``--data fixtures`` one of
    the two would be ignored: say so instead of silently reading the folder."""
    if data_dir is None:
        return
    if data != "auto":
        raise UsageError(f"--data {data} and --data-dir {data_dir} conflict (--data-dir reads local files instead); "
                         f"give only one of them")
    if not data_dir.is_dir():
        raise UsageError(f"--data-dir {data_dir} is not a folder")


def settings_from_args(args: argparse.Namespace):
    from harness.run.generation import resolve_device
    from harness.run.runner import RunSettings
    from harness.run.threads import resolve_threads
    from models.registry import model_names, preset_names
    from tasks.registry import task_names

    if not args.models or not args.tasks:
        raise UsageError("give --models and --tasks (see --list for the names)")
    models = split_names(args.models, model_names(), "model", allow_hf=True)
    tasks = split_names(args.tasks, task_names(), "task")
    for flag, value in (("--limit", args.limit), ("--batch-size", args.batch_size), ("--gen-length", args.gen_length),
                        ("--samples", args.samples)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, got {args.warmup}")
    valid_presets = [*preset_names(models), SMOKE_PRESET]
    if args.preset is not None and args.preset not in valid_presets:
        raise UsageError(f"unknown preset {args.preset}; valid presets for these models: {', '.join(valid_presets)}")
    check_data_options(args.data, args.data_dir)
    return RunSettings(
        models=models, tasks=tasks, output=args.output or default_output(models, tasks, experiment_settings(args)), limit=args.limit,
        seed=args.seed, device=args.device, dtype=args.dtype, batch_size=args.batch_size, warmup=args.warmup,
        data=args.data, data_dir=args.data_dir, gen_length=args.gen_length, preset=args.preset,
        model_args=parse_model_args(args.model_arg, models), rescore=args.rescore, progress=not args.no_progress,
        threads=resolve_threads(args.threads, resolve_device(args.device)), schedule=args.schedule,
        reuse_stale=args.reuse_stale, samples=args.samples,
    )


def quiet_libraries() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def run_main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        print(list_registry())
        return 0
    quiet_libraries()
    from harness.distributed import data_parallel as distributed
    from harness.run.folder import removed_if_left_empty
    from harness.run.ranks import context_from_env
    from harness.run.runner import Runner
    from harness.run.space import disk_full_ends_run
    from harness.run.summary import summary_table

    settings = settings_from_args(args)
    ctx = context_from_env()
    runner = Runner(settings, ctx)
    folder = runner.folder
    with disk_full_ends_run(folder.root, [folder.store_root]), removed_if_left_empty(folder.root), \
            one_writer(folder.root, ctx, args.wait):
        distributed.start(ctx, runner.device)
        try:
            finished = runner.run(wait_for_ranks=lambda: distributed.wait_for_all(ctx))
        finally:
            distributed.stop(ctx)
        if finished is not None:
            print(summary_table(finished.results))
            print(f"results: {runner.folder.results_path}")
            print(write_run_report(settings.output) if finished.results else
                  "report not written: the run has no results")
    return 0


def one_writer(root: Path, ctx: Any, wait: bool):
    """The run folder's lock (harness.run.lock), taken once for all ranks: by rank 0, before the ranks meet."""
    import contextlib

    from harness.run.lock import hold_run_folder

    return hold_run_folder(root, wait, note=lambda message: print(f"note: {message}", flush=True)) \
        if ctx.is_main else contextlib.nullcontext()


def write_run_report(output: Path) -> str:
    """The HTML report of a finished run, built once at its end (results.json is rewritten after every job, so
    ``run_eval.py report`` builds it for a run stopped midway); a report that fails does not fail the run."""
    from reports.html import write_report

    from harness.run.space import is_disk_full

    try:
        return f"report: {write_report([output], output)}"
    except (ValueError, OSError) as error:
        if is_disk_full(error):
            raise  # the run's full-disk line, exit 3
        return f"report not written: {error} (retry with: run_eval.py report {output})"


def sweep_main(argv: Sequence[str]) -> int:
    from harness.distributed import data_parallel as distributed
    from harness.run.generation import resolve_device
    from harness.run.folder import removed_if_left_empty
    from harness.run.ranks import context_from_env
    from harness.run.space import disk_full_ends_run
    from harness.sweep.driver import SweepSpec, parse_grids, parse_reference, run_sweep
    from harness.sweep.arguments import build_sweep_parser, list_sweep

    try:
        args = build_sweep_parser(build_parser()).parse_args(list(argv))
    except SystemExit as done:  # --help
        return int(done.code or 0)
    if args.list:
        print(list_sweep(list_registry()))
        return 0
    quiet_libraries()
    if not args.grid:
        raise UsageError("give at least one --grid (e.g. --grid tiny-refusion.slot_size=4,8 or --grid batch_size=1,4)")
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha must be between 0 and 1, got {args.alpha}")
    base = settings_from_args(args)
    root = args.output or default_output(("sweep", *base.models), base.tasks)
    spec = SweepSpec(parse_grids(args.grid, base.models), parse_reference(args.reference, base.models), args.alpha,
                     args.repeats, args.timing_prompts)
    ctx = context_from_env()
    with disk_full_ends_run(root, [root]), removed_if_left_empty(root), one_writer(root, ctx, args.wait):
        distributed.start(ctx, resolve_device(base.device, ctx.local_rank))
        try:
            run_sweep(spec, base, root, ctx, wait_for_ranks=lambda: distributed.wait_for_all(ctx))
        finally:
            distributed.stop(ctx)
        if ctx.is_main:
            print(write_frontier_files(root))
    return 0


def write_frontier_files(root: Path) -> str:
    """The frontier page and tables; a page that fails does not fail the sweep (every point's results are written)."""
    from harness.sweep.plan import SweepFolder
    from reports.frontier.frame import build_frontier
    from reports.frontier.page import write_frontier

    try:
        frontier = build_frontier(root)
        html = write_frontier(root, frontier)
    except (ValueError, OSError) as error:
        return f"frontier not written: {error} (rerun the same sweep command: finished points are skipped)"
    lines = [h.text for h in frontier.headlines] + list(frontier.crossovers["text"]) + list(frontier.notes)
    return "\n".join(lines + [f"frontier: {html} (table: {SweepFolder(Path(root)).table_path})"])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:
        from reports.command import main_report

        return main_report(argv[1:])
    if argv[:1] == ["export"]:
        from harness.export.command import main_export

        return main_export(argv[1:])
    if argv[:1] == ["gate"]:
        from harness.gate.checks import main_gate

        return main_gate(argv[1:])
    if argv[:1] == ["gate-speed"]:
        quiet_libraries()
        from harness.gate.retiming import main_gate_speed

        return main_gate_speed(argv[1:])
    try:
        if argv[:1] == ["sweep"]:  # the run's options plus grids: the run's error handling
            return sweep_main(argv[1:])
        return run_main(argv)
    except NothingToScore as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except DiskFull as error:
        print(f"error: {error}", file=sys.stderr)
        return DISK_FULL
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("interrupted: finished samples are stored; rerun the same command to resume (or `run_eval.py report "
              "RUN` for the report of the jobs a run finished)", file=sys.stderr)
        return 130
