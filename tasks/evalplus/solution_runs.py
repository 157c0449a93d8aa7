"""Run solutions on input sets in the harness's sandbox and read back what each call returned.

One sandboxed program per input set (a solution on the base inputs, or on the plus inputs), as evalplus runs one
process per set. The program is tasks/evalplus/child.py plus a call carrying the solution, the inputs (a pickle the
harness makes, read in the sandbox) and the time limits; it prints its report between markers drawn per run. The
report travels as data (tasks/evalplus/values.py reads it), never as a pickle.

Time limits follow evalplus (``untrusted_check``): each input may take ``max(1.0, 4 x the canonical solution's
time)`` seconds of wall time, enforced in the program by an alarm as evalplus does; the whole set gets
``min(60, sum of those) + 2`` seconds (evalplus's task timeout and its join margin), enforced by the program from
its own clock and, as a backstop for a solution that swallows its alarm, by lowering its CPU limit to that budget.
The sandbox's own limits stay above every budget and only catch what gets past both.
"""

from __future__ import annotations

import base64
import binascii
import json
import pickle
import secrets
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from evalplus.config import DEFAULT_GT_TIME_LIMIT_FACTOR, DEFAULT_MIN_TIME_LIMIT
from tasks.execution import ExecutionResult, SandboxLimits, run_programs
from tasks.execution.limits import GiB, MiB

CHILD_SOURCE = Path(__file__).with_name("child.py").read_text(encoding="utf-8")

TASK_TIMEOUT_S = 60.0  # evalplus's EVALPLUS_TIMEOUT_PER_TASK default: the most one input set may take
JOIN_MARGIN_S = 2.0  # evalplus adds 1 s to that timeout and joins its process 1 s later still
MAX_REPORT_BYTES = 256 * MiB  # decompressed; a larger report is scored as an error, not read

# evalplus caps a solution's memory at 4 GiB (EVALPLUS_MAX_MEMORY_BYTES); the output cap bounds a report.
CANDIDATE_LIMITS = SandboxLimits(cpu_seconds=TASK_TIMEOUT_S + JOIN_MARGIN_S + 2, wall_seconds=TASK_TIMEOUT_S + 20,
                                 memory_bytes=4 * GiB, max_output_bytes=32 * MiB)
# The canonical solutions run without per-input limits (evalplus runs them in its own process, unlimited).
TRUTH_LIMITS = SandboxLimits(cpu_seconds=120.0, wall_seconds=300.0, memory_bytes=4 * GiB, max_output_bytes=32 * MiB)


@dataclass(frozen=True)
class InputSet:
    """A solution and the inputs to call its entry point with. ``time_limits`` None: the canonical solution, run
    without limits and with its call times measured."""

    code: str
    entry_point: str
    inputs: list[Any]
    time_limits: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Call:
    """One call: ``kind`` ok (``value`` is the encoded output), error or timeout (``value`` says why)."""

    kind: str
    value: Any
    seconds: float


@dataclass(frozen=True)
class SetRun:
    """What running one input set gave. ``status`` "ran": the program reported (``define_error`` set when the
    solution did not even define its entry point; ``calls`` stop at the first that raised). Otherwise the sandbox's
    status (timeout, memory, error) and ``detail``, the last line of the output."""

    status: str
    calls: tuple[Call, ...] = ()
    define_error: str | None = None
    detail: str = ""


def time_limits(truth_seconds: Sequence[float]) -> tuple[float, ...]:
    """evalplus's per-input limits from the canonical solution's call times."""
    return tuple(max(DEFAULT_MIN_TIME_LIMIT, DEFAULT_GT_TIME_LIMIT_FACTOR * t) for t in truth_seconds)


def set_budget(limits: Sequence[float]) -> float:
    """Seconds the whole input set may take (evalplus's task timeout plus its join margin)."""
    return min(TASK_TIMEOUT_S, sum(limits)) + JOIN_MARGIN_S


def program(item: InputSet, marker: str) -> str:
    """The sandboxed program for one input set."""
    budget = None if item.time_limits is None else set_budget(item.time_limits)
    spec = {"code": item.code, "entry_point": item.entry_point, "inputs": item.inputs, "marker": marker,
            "limits": None if item.time_limits is None else list(item.time_limits), "budget": budget}
    request = base64.b64encode(pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
    return f"{CHILD_SOURCE}\nmain({request!r})\n"


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else ""


def _report_text(tail: str, marker: str) -> str | None:
    begin_mark, end_mark = f"{marker}:begin:", f":{marker}:end"
    begin = tail.rfind(begin_mark)
    end = tail.find(end_mark, begin + len(begin_mark)) if begin >= 0 else -1
    if end < 0:
        return None
    packed = base64.b64decode(tail[begin + len(begin_mark):end], validate=True)
    inflater = zlib.decompressobj()
    raw = inflater.decompress(packed, MAX_REPORT_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError(f"report over {MAX_REPORT_BYTES >> 20} MiB")
    return raw.decode("ascii")


def _calls(report: Any) -> tuple[tuple[Call, ...], str | None]:
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise ValueError("report without results")
    define = report.get("define")
    if define is not None and not isinstance(define, str):
        raise ValueError("bad define field")
    calls = []
    for entry in report["results"]:
        if (not isinstance(entry, list) or len(entry) != 3 or entry[0] not in ("ok", "error", "timeout")
                or not isinstance(entry[2], (int, float))):
            raise ValueError("bad result entry")
        calls.append(Call(entry[0], entry[1], float(entry[2])))
    return tuple(calls), define


def read_report(result: ExecutionResult, marker: str) -> SetRun:
    """The program's report, or the sandbox's verdict when it gave none."""
    if result.status != "passed":
        return SetRun(result.status, detail=_last_line(result.output_tail))
    try:
        text = _report_text(result.output_tail, marker)
        if text is None:
            return SetRun("error", detail="the program ended without a report (outputs over the output cap?)")
        calls, define = _calls(json.loads(text))
    except (ValueError, binascii.Error, zlib.error, UnicodeDecodeError, RecursionError) as error:
        return SetRun("error", detail=f"unreadable report: {str(error)[:200]}")
    return SetRun("ran", calls, define)


def run_sets(sets: Sequence[InputSet], limits: SandboxLimits = CANDIDATE_LIMITS,
             workers: int | None = None) -> list[SetRun]:
    """Run every input set in its own sandbox, in parallel; results in the order of ``sets``."""
    markers = [secrets.token_hex(12) for _ in sets]
    results = run_programs([program(item, marker) for item, marker in zip(sets, markers)], limits, workers)
    return [read_report(result, marker) for result, marker in zip(results, markers)]
