"""The program that runs inside the sandbox for LiveCodeBench: run an answer on every test and send back what it
printed (stdin problems) or returned (functional problems), as data.

The program is tasks/evalplus/child.py (its alarm, CPU cap, output encoder and report writer), then this file, then
one ``lcb_main(...)`` call (tasks/livecodebench/judge.py). It uses the standard library only and no
``from __future__`` (it follows another file). The expected outputs never enter the sandbox: the harness compares.

As lcb_runner's ``run_test``: each test runs under a wall-clock alarm of the per-test timeout (an ``Exception``,
like its ``TimeoutException``), ``SystemExit`` ends a stdin test normally, the run stops at the first test that
raises or times out, ``sys.set_int_max_str_digits(50000)`` (its metric module sets it) and ``exit`` exists (``site``
does not run in the sandbox). A stdin test gets a fresh run of the module (prelude, imports, ``wrapped_function``)
with real streams: stdin holds the test's input (``input``, ``sys.stdin.read``, ``readline``, iteration and
``sys.stdin.buffer`` all see it) and stdout is captured, up to ``output_cap`` characters. A functional problem
defines the code once, makes ``Solution()`` when the code has ``class Solution``, and calls the method per test.
"""

import base64
import builtins
import io
import os
import pickle
import sys
import time

try:  # inside the sandbox tasks/evalplus/child.py precedes this source and defines these
    _Alarm  # noqa: B018
except NameError:
    from tasks.evalplus.child import InputTimeout, _Alarm, cap_cpu, describe, emit, encode_output, quietly

NAMESPACE_NAME = "tmp_sol"  # lcb_runner runs the code in ModuleType("tmp_sol")


class _KeptBytes(io.BytesIO):
    """Captured stdout that survives the program closing it."""

    def close(self) -> None:
        pass


def _exit(code=None):
    raise SystemExit(code)


def _failure(error, started, clock):
    return ["timeout" if isinstance(error, InputTimeout) else "error", describe(error), clock() - started]


def _stdin_test(compiled, text, alarm, limit, output_cap, clock):
    """Run the module once with ``text`` on stdin; the result entry (ok with the captured stdout, or why not)."""
    captured = _KeptBytes()
    streams = (sys.stdin, sys.stdout, sys.stderr)
    sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8")
    out = sys.stdout = io.TextIOWrapper(captured, encoding="utf-8", write_through=True)
    sys.stderr = io.StringIO()
    started = clock()
    alarm.start(limit)
    try:
        namespace = {"__name__": NAMESPACE_NAME}
        exec(compiled, namespace)
        namespace["wrapped_function"]()
    except SystemExit:
        pass
    except BaseException as error:
        return _failure(error, started, clock)
    finally:
        alarm.stop()
        try:
            out.flush()
        except Exception:
            pass
        sys.stdin, sys.stdout, sys.stderr = streams
    seconds = clock() - started
    return ["ok", captured.getvalue()[:output_cap * 4].decode("utf-8", "replace")[:output_cap], seconds]


def _define(code, fn_name, alarm, limit, streams):
    """The method to call: ``Solution().<fn_name>`` when the code has ``class Solution``, else the function."""
    namespace = {"__name__": NAMESPACE_NAME}

    def define():
        exec(compile(code, "<solution>", "exec"), namespace)
        return namespace["Solution"]() if "class Solution" in code else None

    instance = quietly(alarm, limit, define, streams)
    method = getattr(instance, fn_name, None) if instance is not None else namespace.get(fn_name)
    if method is None:
        raise AttributeError(f"the solution defines no {fn_name}")
    return method


def run_tests(code, fn_name, inputs, timeout, budget, output_cap):
    """Run every test in order; a report ``{"define": why the code could not be set up, "results": [[kind, value,
    seconds], ...]}`` that stops at the first test that raised."""
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(50000)
    builtins.exit = _exit
    clock = time.monotonic
    deadline = clock() + budget
    cap_cpu(budget)
    alarm, streams = _Alarm(), (sys.stdout, sys.stderr)
    report = {"define": None, "results": []}
    results = report["results"]
    try:
        if fn_name is None:
            compiled = compile(code, "<solution>", "exec")
        else:
            method = _define(code, fn_name, alarm, min(timeout, deadline - clock()), streams)
    except BaseException as error:
        report["define"] = "timeout" if isinstance(error, InputTimeout) else describe(error)
        return report
    for arguments in inputs:
        limit = min(timeout, deadline - clock())
        if limit <= 0:
            results.append(["timeout", "time budget of the problem spent", 0.0])
            break
        if fn_name is None:
            entry = _stdin_test(compiled, arguments, alarm, limit, output_cap, clock)
        else:
            started = clock()
            try:
                value = quietly(alarm, limit, lambda: method(*arguments), streams)
                entry = ["ok", None, clock() - started]
                entry[1] = quietly(alarm, max(deadline - clock(), 1e-3), lambda: encode_output(value), streams)
            except BaseException as error:
                entry = _failure(error, started, clock)
        results.append(entry)
        if entry[0] != "ok":
            break
    return report


def lcb_main(request):
    """Entry point: ``request`` is base64 of a pickle the harness made (trusted data, not the dataset's)."""
    spec = pickle.loads(base64.b64decode(request))
    write, getpid, exit_now = os.write, os.getpid, os._exit
    own_pid = getpid()
    report = run_tests(spec["code"], spec["fn_name"], spec["inputs"], spec["timeout"], spec["budget"],
                       spec["output_cap"])
    if getpid() != own_pid:
        exit_now(0)  # a forked copy of the answer got here: only the program's own process reports
    emit(spec["marker"], report, write)
