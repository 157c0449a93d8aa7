"""``python -m benchmarks [NAME ...] [--quick] [--json OUT] [--write-docs] [--device cuda]``: run benchmarks, print
what each prints and a closing summary, and write every verdict as JSON.

Options this parser does not know go to the one benchmark named (``python -m benchmarks decoders --families
block``). ``--device`` runs the GPU subset (what benchmarks/device_check.sh ran: those benchmarks with their GPU
arguments), each benchmark in its own process under its own time limit, so a slow or broken one still leaves the
others' results in the one JSON (``--json``, or ``$OUT/benchmarks.json`` when the device tool's ``$OUT`` is set);
named with a benchmark outside that subset, ``--device`` is that benchmark's own option."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

from benchmarks.common.verdict import Report
from benchmarks.docs_writer import DOCS, write_docs
from benchmarks.registry import BENCHMARKS, BY_NAME, Benchmark, device_set, quick_set
from benchmarks.suite_info import environment

REPO = Path(__file__).resolve().parents[1]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0], add_help=False,
                                epilog="benchmarks:\n" + listing(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-h", "--help", action="store_true", help="this help, or with one NAME that benchmark's options")
    p.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: every one but those that "
                                                             "need a checkout; with --device: the GPU subset)")
    p.add_argument("--list", action="store_true", help="name each benchmark and the question it answers")
    p.add_argument("--quick", action="store_true", help="small sizes: each runs and reports its targets (~2 min)")
    p.add_argument("--json", type=Path, default=None, help="write every benchmark's verdicts and output here")
    p.add_argument("--write-docs", action="store_true", help=f"rewrite the marked tables of {DOCS} from this run")
    p.add_argument("--from-json", type=Path, nargs="+", default=None, metavar="JSON",
                   help="run nothing: the summary (and --write-docs) from earlier runs' --json files, a long run in "
                        "parts (a benchmark in several: the last file's)")
    p.add_argument("--docs", type=Path, default=REPO / DOCS, help=argparse.SUPPRESS)
    p.add_argument("--device", default=None, help="run the GPU subset on this device (cuda; cpu checks the path)")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # a --device child
    return p


def listing() -> str:
    def tag(b: Benchmark) -> str:
        return " [needs a checkout]" if b.checkout else (" [--device only]" if b.device_only else "")

    return "\n".join(f"  {b.name:<19} {b.question}{tag(b)}" for b in BENCHMARKS)


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    options, extra = p.parse_known_args(argv)
    if options.list:
        print(listing())
        return 0
    unknown = [n for n in options.names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; `python -m benchmarks --list` names them")
    if options.help:
        if len(options.names) == 1:
            benchmark_parser(BY_NAME[options.names[0]]).print_help()
        else:
            p.print_help()
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        p.error(f"{sys.executable} has no torch: run the suite with the project's environment "
                "(.venv/bin/python -m benchmarks, or PYTHON=.venv/bin/python benchmarks/device_check.sh)")
    chosen = [BY_NAME[n] for n in options.names] or (device_set() if options.device else quick_set())
    if options.device and any(b.device is None for b in chosen):  # not in the GPU subset: its own --device option
        extra, options.device = ["--device", options.device, *extra], None
    if extra and len(chosen) != 1:
        p.error(f"options {' '.join(extra)} are a benchmark's own: name exactly one benchmark to give them to")
    json_path = options.json or (Path(os.environ["OUT"]) / "benchmarks.json" if options.device and "OUT" in os.environ
                                 else None)
    began = time.perf_counter()
    if options.from_json:  # nothing runs: each record states its own run (``suite``)
        records = saved_records(p, options.from_json)
    elif options.device and not options.in_process:
        records = [run_isolated(b, options, extra) for b in chosen]
    else:
        records = [run_one(b, options.quick, options.device, extra) for b in chosen]
    suite = environment(options.device, options.quick, time.perf_counter() - began)
    if not options.in_process:  # a --device child: its parent sums up
        print_summary(records, sum(r["seconds"] for r in records) if options.from_json else suite["seconds"])
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"suite": suite, "benchmarks": records}, indent=1) + "\n")
        print(f"wrote {json_path}")
    if options.write_docs:
        for line in write_docs(options.docs, suite, records, every=[b.name for b in quick_set()]):
            print(line)
    return 1 if any(r["status"] != "ok" for r in records) else 0


def saved_records(p: argparse.ArgumentParser, paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The records of earlier runs' JSON files, each with its run's ``suite``, one per benchmark (the last file's),
    in the registry's order; a file that is not such a JSON is one line."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            saved = json.loads(path.read_text())
            found.update((r["name"], r | {"suite": saved["suite"]}) for r in saved["benchmarks"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            p.error(f"{path} is not the JSON of a `python -m benchmarks --json` run ({error}); pass those files")
    return [found[b.name] for b in BENCHMARKS if b.name in found]


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy (the output the JSON and the docs carry)."""

    def __init__(self, out: Any) -> None:
        self.out, self.copy = out, io.StringIO()

    def write(self, text: str) -> int:
        self.out.write(text)
        self.copy.write(text)
        return len(text)

    def flush(self) -> None:
        self.out.flush()


def benchmark_parser(benchmark: Benchmark) -> argparse.ArgumentParser:
    """The benchmark's own options, as its module declares them."""
    module = benchmark.load()
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks {benchmark.name}",
                                     description=(module.__doc__ or "").split("\n\n")[0])
    module.add_arguments(parser)
    return parser


def run_one(benchmark: Benchmark, quick: bool, device: str | None, extra: Sequence[str]) -> dict[str, Any]:
    """One benchmark in this process, one torch thread unless it sets its own: its record."""
    import torch

    arguments = [*benchmark.arguments(quick, device), *extra]
    print(f"\n===== {benchmark.name}: {benchmark.question}\n      python -m benchmarks {benchmark.name} "
          f"{' '.join(arguments)}".rstrip(), flush=True)
    report, status, began = Report(benchmark.name), "ok", time.perf_counter()
    tee = _Tee(sys.stdout)
    torch.set_num_threads(1)
    with contextlib.redirect_stdout(tee):
        try:
            benchmark.load().run(benchmark_parser(benchmark).parse_args(arguments), report)
        except SystemExit as stop:  # argparse's error, already printed on stderr
            status = f"error: bad arguments (exit {stop.code})"
        except Exception as error:  # noqa: BLE001 - one benchmark's crash must not lose the others' results
            traceback.print_exc(file=sys.stdout)
            status = f"error: {type(error).__name__}: {error}"
    return {"name": benchmark.name, "question": benchmark.question, "arguments": arguments, "status": status,
            "seconds": round(time.perf_counter() - began, 2), "threads": torch.get_num_threads(),
            "verdicts": [v.as_json() for v in report.verdicts], "output": tee.copy.getvalue()}


def run_isolated(benchmark: Benchmark, options: argparse.Namespace, extra: Sequence[str]) -> dict[str, Any]:
    """One benchmark of the GPU subset in its own process under its time limit, its output shown as it comes: the
    record it wrote, or one saying why there is none (with what it printed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "one.json"
        command = [sys.executable, "-m", "benchmarks", benchmark.name, "--in-process", "--device", options.device,
                   "--json", str(out), *(["--quick"] if options.quick else []), *extra]
        began, printed = time.perf_counter(), []
        child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reader = threading.Thread(target=_echo, args=(child.stdout, printed), daemon=True)
        reader.start()
        try:
            child.wait(timeout=benchmark.device_seconds or None)
            why = "it wrote no record"
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            why = f"over its {benchmark.device_seconds} s limit"
        reader.join(timeout=10)
        if out.is_file():
            return json.loads(out.read_text())["benchmarks"][0]
        return {"name": benchmark.name, "question": benchmark.question, "arguments": command[3:],
                "status": f"error: {why}", "verdicts": [], "output": "".join(printed),
                "seconds": round(time.perf_counter() - began, 2), "threads": None}


def _echo(stream: Any, kept: list[str]) -> None:
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()
        kept.append(line)


def print_summary(records: list[dict[str, Any]], seconds: float) -> None:
    print(f"\n===== summary ({len(records)} benchmark(s), {seconds:.0f} s)")
    counts = {"PASS": 0, "FAIL": 0, "INFO": 0}
    for record in records:
        mine = {k: sum(v["status"] == k for v in record["verdicts"]) for k in counts}
        counts = {k: counts[k] + mine[k] for k in counts}
        state = "ran" if record["status"] == "ok" else record["status"]
        print(f"{record['name']:<19} {record['seconds']:7.1f} s  {mine['PASS']:3d} pass {mine['FAIL']:3d} fail "
              f"{mine['INFO']:3d} reported  {state}")
        for verdict in record["verdicts"]:
            if verdict["status"] == "FAIL":
                measured = "-" if verdict["measured"] is None else f"{verdict['measured']:.4g}"
                print(f"    FAIL {verdict['name']}: {measured} (target {verdict['target']})")
    print(f"{counts['PASS']} pass, {counts['FAIL']} fail, {counts['INFO']} reported without a target")
