"""The program that runs inside the sandbox for HumanEval+ and MBPP+: call a solution on a list of inputs and send
the outputs back, encoded as data.

evalplus compares each output with the canonical solution's in the process that ran the code. Here the code runs in
the harness's sandbox and the comparison happens in the harness (tasks/evalplus/output_compare.py), so the outputs have to
cross a process boundary as data that cannot execute anything when read: a tagged JSON tree, never a pickle.

This file's source *is* the program: tasks/evalplus/solution_runs.py appends one ``main(...)`` call to it. It therefore uses
the standard library only (the sandbox starts a bare interpreter) and no ``__name__`` (the sandbox execs the
program in an empty namespace). The tests import it to check the encoder directly.

Per input, as evalplus's ``unsafe_execute`` does: the call runs under a wall-clock alarm of its time limit, its
prints are swallowed, and an exception (the alarm's included, which is an ``Exception`` like evalplus's) marks that
input. The run stops at the first input that raises, as evalplus's ``fast_check`` (its default) does.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import math
import os
import pickle
import resource
import signal
import sys
import time
import zlib

MAX_DEPTH = 400  # deeper outputs are sent as opaque (the harness's decoder has the same bound)
OPAQUE_ITEMS = 100_000  # most items read from an iterable that has no data form (a generator, a map, ...)
SMALL_INT_BITS = 4000  # larger ints go as hex: JSON's decimal form hits Python's 4300-digit conversion limit
NUMERIC_KINDS = "biufc"  # numpy dtype kinds sent as numpy values: bool, int, uint, float, complex

_EXACT = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}
# Subclasses of these (namedtuple, Counter, OrderedDict, IntEnum, ...) compare like their base, but have another type.
_BASES = (int, float, complex, str, bytes, tuple, list, dict, set, frozenset)
_DICT_VIEWS = {type({}.keys()): "keys", type({}.items()): "items"}


class InputTimeout(Exception):
    """Raised by the per-input alarm. An Exception, like evalplus's TimeoutException, so a solution that catches
    every Exception swallows it here as it would there."""


def type_name(value: object) -> str:
    kind = type(value)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__name__)}"


def encode(value: object, depth: int = 0) -> object:
    """A JSON-ready tree for ``value``: None, bools, floats and strs as themselves, small ints as themselves, every
    other value as ``[tag, ...]``. Raises for what has no data form; ``encode_output`` turns that into opaque."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is float:
        return value
    if kind is int:
        return value if value.bit_length() < SMALL_INT_BITS else ["int", hex(value)]
    if kind is complex:
        return ["complex", value.real, value.imag]
    if kind is bytes or kind is bytearray:
        return [kind.__name__, base64.b64encode(value).decode("ascii")]
    if kind in _EXACT:
        return [_EXACT[kind], [encode(item, depth + 1) for item in value]]
    if kind is dict:
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    numpy = sys.modules.get("numpy")  # only a solution that imported numpy can return numpy values
    if numpy is not None and isinstance(value, (numpy.generic, numpy.ndarray)):
        return _encode_numpy(numpy, value, depth)
    if kind in _DICT_VIEWS:
        return [_DICT_VIEWS[kind], [encode(item, depth + 1) for item in value]]
    for base in _BASES:
        if isinstance(value, base):
            return ["sub", type_name(value), encode(base(value), depth + 1)]
    raise TypeError(f"no data form for {type_name(value)}")


def _encode_numpy(numpy, value, depth: int) -> object:
    dtype = value.dtype
    if dtype.kind not in NUMERIC_KINDS or (dtype.kind == "f" and dtype.itemsize > 8) or dtype.itemsize > 16:
        raise TypeError(f"numpy dtype {dtype.str} has no Python equivalent")  # objects, strings, long doubles
    if isinstance(value, numpy.generic):
        return ["np", dtype.str, encode(value.item(), depth + 1)]
    if type(value) is not numpy.ndarray:
        raise TypeError(f"no data form for {type_name(value)}")
    return ["ndarray", dtype.str, list(value.shape), encode(value.tolist(), depth + 1)]


def encode_output(value: object) -> object:
    """``encode``, or an opaque marker (type name, and the items when it is a finite iterable) for a value that has
    no data form: evalplus would compare such a value by identity (never equal), or iterate it (``set(out)``)."""
    try:
        return encode(value)
    except Exception:
        pass
    items = None
    try:
        taken = list(itertools.islice(iter(value), OPAQUE_ITEMS + 1))
        if len(taken) <= OPAQUE_ITEMS:
            items = [encode(item) for item in taken]
    except Exception:
        items = None
    return ["opaque", type_name(value), items]


class _Sink:
    """Where the solution's prints go (evalplus swallows them too)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class _Alarm:
    """A one-shot wall-clock alarm that raises InputTimeout, like evalplus's ``time_limit``; only while armed, so a
    signal arriving just as a call returns cannot hit the harness's own code."""

    def __init__(self) -> None:
        self.armed = False
        self.setitimer = signal.setitimer  # bound now: the solution may rebind module attributes
        signal.signal(signal.SIGALRM, self._fire)

    def _fire(self, signum: int, frame: object) -> None:
        if self.armed:
            self.armed = False
            raise InputTimeout("timed out")

    def start(self, seconds: float | None) -> None:
        if seconds is not None:
            self.armed = True
            self.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))

    def stop(self) -> None:
        self.armed = False
        self.setitimer(signal.ITIMER_REAL, 0)


def describe(error: BaseException) -> str:
    try:
        text = str(error).strip().splitlines()
        return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__
    except Exception:
        return type(error).__name__


def cap_cpu(budget: float) -> None:
    """Lower this process's CPU limit to the set's budget: the backstop for a solution that swallows its alarm."""
    try:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        wanted = math.ceil(usage.ru_utime + usage.ru_stime + budget) + 1
        if soft == resource.RLIM_INFINITY or wanted < soft:
            resource.setrlimit(resource.RLIMIT_CPU, (wanted, hard))
    except (ValueError, OSError):
        pass


def quietly(alarm: _Alarm, seconds: float | None, action, streams: tuple) -> object:
    """``action()`` with its prints swallowed and under the alarm (None: no limit)."""
    sys.stdout = sys.stderr = _Sink()
    alarm.start(seconds)
    try:
        return action()
    finally:
        alarm.stop()
        sys.stdout, sys.stderr = streams


def run(code: str, entry_point: str, inputs: list, limits: list | None, budget: float | None) -> dict:
    """Define the solution, then call it on each input. ``limits`` (seconds per input) and ``budget`` (seconds for
    the whole set) are None for the canonical solution, whose call times are measured instead, on deep copies of
    the inputs as evalplus's ``trusted_exec`` does."""
    truth = limits is None
    clock, perf = time.monotonic, time.perf_counter
    deadline = None if budget is None else clock() + budget
    if budget is not None:
        cap_cpu(budget)
    alarm, streams = _Alarm(), (sys.stdout, sys.stderr)
    report: dict = {"define": None, "results": []}
    results = report["results"]

    def remaining() -> float | None:
        return None if deadline is None else deadline - clock()

    namespace: dict = {}
    try:
        quietly(alarm, remaining(), lambda: exec(compile(code, "<solution>", "exec"), namespace), streams)
    except BaseException as error:
        report["define"] = "timeout" if isinstance(error, InputTimeout) else describe(error)
        return report
    if entry_point not in namespace:
        report["define"] = f"the solution defines no {entry_point}"
        return report
    function = namespace[entry_point]
    for index, arguments in enumerate(inputs):
        limit = None
        if not truth:
            left = remaining()
            limit = limits[index] if left is None else min(limits[index], left)
            if limit <= 0:
                results.append(["timeout", "time budget of the input set spent", 0.0])
                break
        else:
            arguments = copy.deepcopy(arguments)
        started = perf()
        try:
            output = quietly(alarm, limit, lambda: function(*arguments), streams)
            seconds = perf() - started
            # Encoded at once, as evalplus compares at once (a later call may mutate it); like evalplus's comparison
            # (which may iterate a generator), it counts against the set's budget, not the input's limit.
            encoded = quietly(alarm, remaining(), lambda: encode_output(output), streams)
        except BaseException as error:
            kind = "timeout" if isinstance(error, InputTimeout) else "error"
            results.append([kind, describe(error), perf() - started])
            break
        results.append(["ok", encoded, seconds])
    return report


def emit(marker: str, report: dict, write=os.write) -> None:
    """Write the report to stdout between markers: compressed JSON in base64, after anything the solution printed."""
    data = base64.b64encode(zlib.compress(json.dumps(report, separators=(",", ":")).encode("ascii"), 6))
    view = memoryview(marker.encode("ascii") + b":begin:" + data + b":" + marker.encode("ascii") + b":end\n")
    while view:
        view = view[write(1, view):]


def main(request: str) -> None:
    """Entry point of the program: ``request`` is base64 of a pickle the harness made (trusted data)."""
    spec = pickle.loads(base64.b64decode(request))
    write, getpid, exit_now = os.write, os.getpid, os._exit
    own_pid = getpid()
    report = run(spec["code"], spec["entry_point"], spec["inputs"], spec["limits"], spec["budget"])
    if getpid() != own_pid:
        exit_now(0)  # a forked copy of the solution got here: only the program's own process reports
    emit(spec["marker"], report, write)
