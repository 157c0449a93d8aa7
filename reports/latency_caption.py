"""The latency figure's caption: what a sample's latency measured under the schedule it was decoded with, read from
the timed samples' own records (``schedule`` and ``batch_size``, docs/measurement.md), so a report that puts a
continuous run beside a static one says which boxes are which."""

from __future__ import annotations

from typing import Sequence

from harness.run.records import SampleRecord
from harness.run.schedule import CONTINUOUS

LEAD = "Decoder wall time per sample (tokenisation and scoring excluded), warm-up samples left out."


def measured(schedule: str, batch_size: int) -> str:
    """What ``latency_s`` is for a sample of ``schedule`` decoded with at most ``batch_size`` rows together."""
    if schedule == CONTINUOUS:
        return (f"with rows in flight (continuous schedule, up to {batch_size} rows) a sample's latency is its "
                f"request's own time, from the forward that admitted it to the one that gave its last token (its "
                f"wait for a free row not included)")
    if batch_size > 1:
        return (f"in static batches of up to {batch_size} rows a sample's latency is its batch's wall time split "
                f"evenly across the batch's rows (every row of a batch shows the same, however early it ended)")
    return "decoded one request per call (static, batch 1) a sample's latency is the call's wall time"


def latency_caption(samples: dict[tuple[str, str], Sequence[SampleRecord]], labels: Sequence[str]) -> str:
    """The caption for the latency boxes of ``samples`` ((label, task) -> records): what each schedule the timed
    samples were decoded with measured, naming the models of each when they differ."""
    groups: dict[tuple[str, int], list[str]] = {}
    for label in labels:
        sizes: dict[str, int] = {}
        for (owner, _), records in samples.items():
            for record in records:
                if owner == label and not record.warmup:
                    sizes[record.schedule] = max(sizes.get(record.schedule, 0), record.batch_size)
        for schedule, size in sorted(sizes.items()):
            groups.setdefault((schedule, size), []).append(label)
    if not groups:
        return LEAD
    if len(groups) == 1:
        phrase = measured(*next(iter(groups)))
        return f"{LEAD} {phrase[0].upper()}{phrase[1:]}."
    clauses = [f"{', '.join(owners)}: {measured(*key)}" for key, owners in groups.items()]
    return f"{LEAD} " + "; ".join(clauses) + "."
