"""Expected outputs: the canonical solution's outputs and call times on every input, as evalplus's
``get_groundtruth`` computes them, but run in the harness's sandbox (a ``--data-dir`` file is still code from
outside the harness) and cached per problem rather than per dataset file.

The cache key hashes what decides the outputs (the problem's code and inputs), so a subset (``--limit``), a fixture
and a full release share entries, and an edited problem gets new ones. The call times set the candidates' time
limits, which is why they are cached too, as evalplus caches them: limits stay the same from run to run on one
machine. Entries are the child's encoded outputs (JSON, gzip), read back with the same decoder as a candidate's.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS

from harness.files import cache_root, write_bytes_atomic
from tasks.evalplus.releases import Problem
from tasks.evalplus.solution_runs import TRUTH_LIMITS, InputSet, SetRun, run_sets
from tasks.evalplus.values import PayloadError, decode
from tasks.records import DataError

CACHE_FORMAT = 1  # bump when the child's encoding or the entry layout changes
SETS = ("base", "plus")


@dataclass(frozen=True)
class Truth:
    """Expected outputs and the canonical solution's call times (seconds), per input set."""

    outputs: dict[str, list[Any]]
    seconds: dict[str, list[float]]


def default_cache_dir() -> Path:
    """``evalplus`` under the harness's cache root (``$DLLM_HARNESS_CACHE``, else the XDG cache), read when called."""
    return cache_root() / "evalplus"


def _entry_path(cache_dir: Path, problem: Problem) -> Path:
    return cache_dir / f"v{CACHE_FORMAT}-{problem.key}.json.gz"


def _read_entry(path: Path) -> dict[str, Any] | None:
    try:
        with gzip.open(path, "rt", encoding="ascii") as handle:
            entry = json.load(handle)
    except (OSError, ValueError, EOFError):  # absent, or a broken file: recompute
        return None
    if not isinstance(entry, dict) or not all(isinstance(entry.get(s), dict) for s in SETS):
        return None
    return entry


def _write_entry(path: Path, entry: dict[str, Any]) -> None:
    write_bytes_atomic(path, gzip.compress(json.dumps(entry, separators=(",", ":")).encode("ascii")))


def _entry_of(problem: Problem, name: str, run: SetRun, count: int) -> dict[str, Any]:
    """The encoded outputs and times of one set, or a DataError: a canonical solution must run on its inputs."""
    where = f"{problem.task_id}: the canonical solution"
    if run.status != "ran":
        raise DataError(f"{where} gave {run.status} on the {name} inputs ({run.detail or 'no output'})")
    if run.define_error is not None:
        raise DataError(f"{where} does not define {problem.entry_point} ({run.define_error})")
    bad = next((i for i, call in enumerate(run.calls) if call.kind != "ok"), None)
    if bad is not None or len(run.calls) != count:
        index = len(run.calls) if bad is None else bad
        reason = "no output" if bad is None else run.calls[bad].value
        raise DataError(f"{where} fails on {name} input {index + 1} of {count} ({reason})")
    return {"outputs": [call.value for call in run.calls], "seconds": [call.seconds for call in run.calls]}


def _truth(problem: Problem, entry: dict[str, Any]) -> Truth:
    outputs, seconds = {}, {}
    for name in SETS:
        try:
            values = [decode(node) for node in entry[name]["outputs"]]
        except PayloadError as error:
            raise DataError(f"{problem.task_id}: unreadable expected output ({error})") from None
        if problem.dataset == "mbpp" and problem.entry_point in MBPP_OUTPUT_NOT_NONE_TASKS:
            values = [value is not None for value in values]  # evalplus's trusted_exec(output_not_none=True)
        outputs[name] = values
        seconds[name] = [float(t) for t in entry[name]["seconds"]]
    return Truth(outputs, seconds)


def ground_truth(problems: Sequence[Problem], cache_dir: Path | None = None,
                 workers: int | None = None) -> dict[str, Truth]:
    """Expected outputs per problem key, computed (in parallel, in the sandbox) for problems not in the cache."""
    cache_dir = default_cache_dir() if cache_dir is None else cache_dir
    unique = {p.key: p for p in problems}
    entries = {key: _read_entry(_entry_path(cache_dir, p)) for key, p in unique.items()}
    missing = [p for key, p in unique.items() if entries[key] is None]
    sets = [InputSet(p.solution, p.entry_point, p.base_inputs if name == "base" else p.plus_inputs)
            for p in missing for name in SETS]
    runs = iter(run_sets(sets, TRUTH_LIMITS, workers))
    for p in missing:
        entry = {name: _entry_of(p, name, next(runs), len(p.base_inputs if name == "base" else p.plus_inputs))
                 for name in SETS}
        _write_entry(_entry_path(cache_dir, p), entry)
        entries[p.key] = entry
    return {key: _truth(p, entries[key]) for key, p in unique.items()}
