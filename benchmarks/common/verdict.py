"""The verdict record every benchmark reports: what was checked, against which target, what was measured, and
whether it held. Benchmarks print their lines as they always did; the record is what ``--json`` writes and what the
suite's summary and its test read, so no one parses PASS/FAIL out of printed text."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Verdict:
    """One check. ``passed`` is None for a figure reported without a target (and for a target not measured, with
    ``measured`` None and the reason in ``line``)."""

    benchmark: str
    name: str
    target: str  # e.g. ">= 1.0", "< 10%"; "" for a figure with no target
    measured: float | None
    passed: bool | None
    line: str = ""  # the line the benchmark printed for it

    @property
    def status(self) -> str:
        return "PASS" if self.passed else ("FAIL" if self.passed is False else "INFO")

    def as_json(self) -> dict[str, Any]:
        return asdict(self) | {"status": self.status}


def holds(measured: float, op: str, bound: float) -> bool:
    """``measured op bound`` for the comparisons the targets use."""
    return {">=": measured >= bound, "<=": measured <= bound, "<": measured < bound, ">": measured > bound}[op]


@dataclass
class Report:
    """Collects one benchmark's verdicts while it prints them."""

    benchmark: str
    verdicts: list[Verdict] = field(default_factory=list)

    def add(self, name: str, target: str, measured: float | None, passed: bool | None, line: str | None = None,
            echo: bool = True) -> bool | None:
        """Records a check and prints ``line`` (unless ``echo`` is off: the caller printed it)."""
        self.verdicts.append(Verdict(self.benchmark, name, target, measured, passed, line or name))
        if echo and line is not None:
            print(line)
        return passed

    def check(self, name: str, measured: float, op: str, bound: float, line: str | None = None,
              also: bool = True) -> bool:
        """A ratio or count against its bound (``also``: a further condition, such as identical tokens); prints
        ``PASS``/``FAIL`` and ``line`` when given."""
        passed = holds(measured, op, bound) and also
        self.add(name, f"{op} {bound:g}", measured, passed,
                 None if line is None else f"{'PASS' if passed else 'FAIL'} {line}")
        return passed

    def info(self, name: str, measured: float | None, line: str | None = None) -> None:
        """A figure reported without a target (or a target that could not be measured, with ``measured`` None)."""
        self.add(name, "", measured, None, line)

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.passed is False]
