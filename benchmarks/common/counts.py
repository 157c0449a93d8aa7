"""What the counted decodes report, per network call: the exact counts of harness/timing/op_count.py (aten ops and
host reads outside the network's calls, bytes copied), the same on any machine, so both count benchmarks read them
one way."""

from __future__ import annotations

from dataclasses import dataclass

from harness.timing.op_count import StepCounts


@dataclass(frozen=True)
class Counted:
    counts: StepCounts

    @property
    def ops_per_call(self) -> float:
        return self.counts.per_forward()[0]

    @property
    def reads_per_call(self) -> float:
        return self.counts.per_forward()[1]

    @property
    def reads_inside_per_call(self) -> float:
        """The network's own host reads per call (transformers', the MoE's expert counts)."""
        return sum(self.counts.reads_inside.values()) / max(self.counts.forwards, 1)
