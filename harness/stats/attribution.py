"""Why a model is faster or slower than a baseline: its speed ratio split into three factors that multiply back.

Per generated token, time is t = f * c / s, with f forwards per token (network calls a token costs), c seconds per
forward (what a call costs) and s the share of decode time spent inside forwards. So, for a model m against a
baseline b,

    speed ratio  t_b / t_m  =  (f_b / f_m)  *  (c_b / c_m)  *  (s_m / s_b)
                               forwards      time per       time outside forwards
                               per token     forward        (the decoder's own work)

Each factor above 1 is a reason the model is faster. Where a piece was not measured the finer split is left out
rather than guessed: without time inside forwards only forwards per token is split off (the rest is "time per
forward, outside included"); an engine-served baseline reports no forward count, so only the ratio itself stands.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

BASELINE_KINDS = ("ar", "vllm")  # transformers' greedy loop and the serving engine
NO_FORWARDS = "no forward count (an engine reports none): only the speed ratio itself"
NO_INSIDE = "time inside forwards not measured: forwards per token split off, the rest is time per forward"


@dataclass(frozen=True)
class TokenCost:
    """What one generated token costs: wall seconds, forwards, and seconds inside forwards (None: unknown)."""

    seconds: float
    forwards: float | None = None
    forward_seconds: float | None = None

    @property
    def outside_seconds(self) -> float | None:
        return None if self.forward_seconds is None else self.seconds - self.forward_seconds


@dataclass(frozen=True)
class Attribution:
    model: str
    baseline: str
    task: str
    speed_ratio: float  # model tokens/s over baseline tokens/s
    forwards_factor: float | None  # baseline forwards per token over the model's
    forward_cost_factor: float | None  # baseline seconds per forward over the model's (outside time included when
    # inside time is unknown)
    outside_factor: float | None  # model's inside-forward share over the baseline's
    model_cost: TokenCost
    baseline_cost: TokenCost
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def attribute(model: TokenCost, baseline: TokenCost) -> tuple[float, float | None, float | None, float | None,
                                                              str | None]:
    """(speed ratio, forwards factor, time-per-forward factor, outside factor, note); factors multiply to the ratio."""
    ratio = baseline.seconds / model.seconds
    if model.forwards is None or baseline.forwards is None:
        return ratio, None, None, None, NO_FORWARDS
    forwards = baseline.forwards / model.forwards
    if not model.forward_seconds or not baseline.forward_seconds:  # unmeasured, or no time seen inside forwards
        return ratio, forwards, ratio / forwards, None, NO_INSIDE
    per_forward = (baseline.forward_seconds / baseline.forwards) / (model.forward_seconds / model.forwards)
    outside = (model.forward_seconds / model.seconds) / (baseline.forward_seconds / baseline.seconds)
    return ratio, forwards, per_forward, outside, None


def token_cost(result: dict[str, Any]) -> TokenCost | None:
    """A result's per-token cost from its speed figures; None when it has no timed tokens."""
    piece = result.get("speed", {}).get("per_token") or {}
    if not piece.get("seconds"):
        return None
    return TokenCost(piece["seconds"], piece.get("forwards"), piece.get("forward_seconds"))


def is_baseline(result: dict[str, Any]) -> bool:
    return result.get("manifest", {}).get("model", {}).get("kind") in BASELINE_KINDS


def is_served(result: dict[str, Any]) -> bool:
    """Served over HTTP by any OpenAI-compatible server (``openai:``): timed on the client, across a network, on
    hardware the run does not describe, so never split against another model's cost."""
    return (result.get("manifest", {}).get("implementation") or {}).get("network") == "served"


def attribution_table(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every model against every baseline of the same task (the HF loop and the engine alike); models served over
    HTTP take no part."""
    rows = []
    for base in results:
        if not is_baseline(base) or (base_cost := token_cost(base)) is None:
            continue
        for other in results:
            if other is base or other["task"] != base["task"] or is_served(other) or \
                    (cost := token_cost(other)) is None:
                continue
            ratio, forwards, per_forward, outside, note = attribute(cost, base_cost)
            rows.append(Attribution(other["model"], base["model"], base["task"], ratio, forwards, per_forward,
                                    outside, cost, base_cost, note).as_dict())
    return rows
