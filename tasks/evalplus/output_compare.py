"""evalplus's verdict on one input set: each output against the canonical solution's, as evalplus 0.3.1 compares.

The comparison in evalplus lives inside ``evalplus.eval.unsafe_execute``, interleaved with running the code, so it
cannot be called on its own. ``check_set`` is that loop's comparison, statement for statement, over outputs that
came back from the sandbox; it imports evalplus's own pieces (``is_floats``, the special oracles and their task
lists) rather than copying them. Two quirks are kept on purpose, because they decide verdicts: the special oracles
are picked by entry-point name, and ``atol``, once raised to 1e-6 by a float output, stays raised for the later
inputs of the set. The tests check verdicts against evalplus's ``check_correctness`` on the fixtures.

One deliberate difference: in evalplus 0.3.1 the ``find_zero`` oracle (HumanEval/32) ``continue``s before
recording the input as passed, so ``untrusted_check`` fails every solution, a correct one included. Upstream
evalplus fixed that (the oracle records the pass); this follows the fix, so HumanEval/32 is passable here.

What cannot match exactly: evalplus compares the live object, here its data form (tasks/evalplus/values.py), so a
user class with its own ``__eq__`` compares by identity here; and the oracle for ``find_zero`` sees the inputs as
sent, not as the solution may have mutated them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from evalplus.eval import is_floats
from evalplus.eval._special_oracle import (
    MBPP_OUTPUT_NOT_NONE_TASKS,
    MBPP_OUTPUT_SET_EQ_TASKS,
    _digit_distance_nums,
    _poly,
    _surface_Area,
)

from tasks.evalplus.solution_runs import Call, SetRun
from tasks.evalplus.values import PayloadError, decode

DATASETS = ("humaneval", "mbpp")


@dataclass(frozen=True)
class Verdict:
    """``status``: passed, failed (a wrong output), error (the solution raised or did not define its entry point),
    timeout, memory. ``detail`` names the first input that decided it."""

    status: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # e.g. an int over Python's 4300-digit str limit
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def outputs_match(dataset: str, entry_point: str, inp: Sequence[Any], out: Any, exp: Any,
                  atol: float) -> tuple[bool, float]:
    """One output against the expected one: (match, the atol for the next input). The body is evalplus's
    ``unsafe_execute`` comparison; an exception there means a mismatch, as it does in evalplus."""
    try:
        exact_match = out == exp

        # ============== special oracles (evalplus) ================= #
        if dataset == "mbpp":
            if "are_equivalent" == entry_point:  # Mbpp/164 special oracle
                exact_match = exact_match or True
            elif "sum_div" == entry_point:  # Mbpp/295 special oracle
                exact_match = exact_match or out == 0
            elif "surface_Area" == entry_point:  # Mbpp/581 special oracle
                exact_match = exact_match or abs(out - _surface_Area(*inp)) <= atol
            elif "digit_distance_nums" == entry_point:  # Mbpp/558 special oracle
                exact_match = exact_match or out == _digit_distance_nums(*inp)
            elif entry_point in MBPP_OUTPUT_SET_EQ_TASKS:
                exact_match = set(out) == set(exp)
            elif entry_point in MBPP_OUTPUT_NOT_NONE_TASKS:
                # exp is True if not None, False if None
                if isinstance(out, bool):
                    exact_match = out == exp
                else:
                    exact_match = exp == (out is not None)

        if dataset == "humaneval":
            if "find_zero" == entry_point:
                assert abs(_poly(*inp, out)) <= atol
                return True, atol  # upstream's fix: 0.3.1 never records this pass (see the module docstring)
        # ============== special oracles ================= #

        if atol == 0 and is_floats(exp):
            atol = 1e-6  # enforce atol for float comparison
        if not exact_match and atol != 0:
            # explicitly set rtol=1e-07 to match `np.testing.assert_allclose`'s default values
            assert type(out) == type(exp)
            if isinstance(exp, (list, tuple)):
                assert len(out) == len(exp)
            assert np.allclose(out, exp, rtol=1e-07, atol=atol)
        else:
            assert exact_match
    except Exception:
        return False, atol
    return True, atol


def _call_failure(call: Call, index: int, total: int) -> Verdict:
    status = "timeout" if call.kind == "timeout" else "error"
    return Verdict(status, f"input {index + 1} of {total}: {call.value}")


def check_set(dataset: str, entry_point: str, inputs: Sequence[Sequence[Any]], run: SetRun,
              expected: Sequence[Any], atol: float) -> Verdict:
    """The verdict on one input set, stopping at the first input that fails (evalplus's fast_check)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown evalplus dataset {dataset!r} (known: {', '.join(DATASETS)})")
    if len(expected) != len(inputs):
        raise ValueError(f"{len(inputs)} inputs but {len(expected)} expected outputs")
    if run.status != "ran":
        return Verdict(run.status, run.detail or f"the program ended with {run.status}")
    if run.define_error is not None:
        status = "timeout" if run.define_error == "timeout" else "error"
        return Verdict(status, f"defining {entry_point}: {run.define_error}")
    total = len(inputs)
    for index, (inp, exp) in enumerate(zip(inputs, expected)):
        if index >= len(run.calls):
            return Verdict("error", f"input {index + 1} of {total}: no output came back")
        call = run.calls[index]
        if call.kind != "ok":
            return _call_failure(call, index, total)
        try:
            out = decode(call.value)
        except PayloadError as error:
            return Verdict("failed", f"input {index + 1} of {total}: unreadable output ({error})")
        match, atol = outputs_match(dataset, entry_point, inp, out, exp, atol)
        if not match:
            return Verdict("failed", f"input {index + 1} of {total}: expected {short_repr(exp)}, "
                                     f"got {short_repr(out)}")
    return Verdict("passed")
