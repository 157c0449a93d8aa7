"""Repeated samples per item (``--samples K``, docs/measurement.md): where K comes from and when it is pointless.

K is the run's (``--samples``) or, where the run sets none, the model preset's for the task (``samples`` beside a
preset's decoder options, as ``gen_length`` is: a paper that reports avg@k states its k), else 1. Each sample is a
request of its own: its own key and seed (harness.run.runner.plan, models.base.sample_identity).
"""

from __future__ import annotations

from typing import Any

SAMPLES = "samples"  # the preset key


def draws_nothing(decoding: dict[str, Any]) -> bool:
    """Whether a decoding (a config's ``record``) is deterministic, so an item's samples are all the same:
    temperature 0 (or an autoregressive decoder not sampling) and no step that draws at random without a temperature
    (LLaDA's random remasking, Dream's ``origin`` transfer)."""
    if decoding.get("do_sample") is False:
        return True
    return (decoding.get("temperature") == 0 and decoding.get("remasking") != "random"
            and decoding.get("alg") != "origin")
