"""What the gate decides, as records: its settings, one row per (model, task), the report and its exit codes.

Kept apart from the checks (harness.gate.checks) and the printed table (harness.gate.output), which both read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.errors import UserError
from harness.gate.drift import Drift
from harness.gate.power import Power
from harness.stats.significance import AccuracyTest

PASS, REGRESSION, NOT_COMPARABLE = 0, 1, 2


class GateError(UserError, ValueError):
    """The runs cannot be compared, or the input is bad; the message is one line for the user."""


@dataclass(frozen=True)
class GateSettings:
    max_accuracy_drop: float = 1.0  # percentage points; 100 turns accuracy gating off
    max_tps_drop: float = 0.30  # fraction of the baseline's tokens/s (docs/benchmarks.md: the re-timed noise)
    alpha: float = 0.05
    tasks: tuple[str, ...] | None = None
    max_changed_outputs: int | None = None  # None: drift is reported, not gated
    max_forwards_increase: float = 0.0  # fraction of the baseline's forwards per token
    allow_underpowered: bool = False
    allow_decoding_change: bool = False


@dataclass(frozen=True)
class Speed:
    """The tokens/s compared: re-timed medians normalised by the reference workload, or the runs' own figures."""

    source: str  # "re-timed" | "run"
    baseline_tps: float | None
    candidate_tps: float | None
    change: float | None  # relative change of the compared figure (-0.2 is 20% slower)


@dataclass(frozen=True)
class GateRow:
    model: str
    task: str
    metric: str
    accuracy: AccuracyTest
    p_holm: float
    power: Power
    drift: Drift | None
    baseline_fpt: float | None  # forwards per generated token
    candidate_fpt: float | None
    speed: Speed
    accuracy_regression: bool
    drift_regression: bool
    forwards_regression: bool
    speed_regression: bool

    @property
    def verdicts(self) -> list[str]:
        flags = (("ACCURACY", self.accuracy_regression), ("DRIFT", self.drift_regression),
                 ("FORWARDS", self.forwards_regression), ("SPEED", self.speed_regression))
        return [name for name, flag in flags if flag]


@dataclass(frozen=True)
class GateReport:
    settings: GateSettings
    rows: tuple[GateRow, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> bool:
        return any(r.verdicts for r in self.rows)
