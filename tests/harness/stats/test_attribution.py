"""The speedup attribution: factors that multiply back to the measured ratio, and honest gaps where data is missing."""

import math

import pytest

from harness.stats.aggregate import per_token
from harness.stats.attribution import NO_FORWARDS, NO_INSIDE, TokenCost, attribute, attribution_table


def test_factors_multiply_to_the_ratio_and_match_a_hand_computation():
    # baseline: 1 forward per token, 10 ms inside each, 2 ms outside per token -> 12 ms/token
    # model: 0.25 forwards per token, 20 ms inside each (bigger canvas), 3 ms outside -> 8 ms/token
    base = TokenCost(seconds=0.012, forwards=1.0, forward_seconds=0.010)
    model = TokenCost(seconds=0.008, forwards=0.25, forward_seconds=0.005)
    ratio, forwards, per_forward, outside, note = attribute(model, base)
    assert ratio == pytest.approx(1.5)
    assert forwards == pytest.approx(4.0)  # four times fewer calls per token
    assert per_forward == pytest.approx(0.5)  # each call costs twice as much
    assert outside == pytest.approx((0.005 / 0.008) / (0.010 / 0.012))  # 0.75: more of its time is outside calls
    assert forwards * per_forward * outside == pytest.approx(ratio)
    assert note is None
    assert model.outside_seconds == pytest.approx(0.003)


def test_without_inside_time_only_forwards_per_token_is_split_off():
    base = TokenCost(seconds=0.012, forwards=1.0)
    model = TokenCost(seconds=0.006, forwards=0.5, forward_seconds=0.004)
    ratio, forwards, per_forward, outside, note = attribute(model, base)
    assert (ratio, forwards, outside, note) == (pytest.approx(2.0), pytest.approx(2.0), None, NO_INSIDE)
    assert per_forward == pytest.approx(1.0)


def test_an_engine_without_forward_counts_keeps_only_the_ratio():
    engine = TokenCost(seconds=0.002)
    model = TokenCost(seconds=0.008, forwards=0.25, forward_seconds=0.005)
    assert attribute(model, engine) == (pytest.approx(0.25), None, None, None, NO_FORWARDS)
    assert attribute(engine, model)[0] == pytest.approx(4.0)


def _result(model: str, kind: str, task: str, cost: dict) -> dict:
    return {"model": model, "task": task, "manifest": {"model": {"kind": kind}}, "speed": {"per_token": cost}}


def test_every_model_is_set_against_every_baseline_of_its_task():
    hf = _result("qwen3", "ar", "gsm8k", {"seconds": 0.01, "forwards": 1.0, "forward_seconds": 0.009})
    engine = _result("qwen3-vllm", "vllm", "gsm8k", {"seconds": 0.004, "forwards": None, "forward_seconds": None})
    dllm = _result("refusion", "refusion", "gsm8k", {"seconds": 0.005, "forwards": 0.3, "forward_seconds": 0.004})
    other_task = _result("refusion", "refusion", "mbpp", {"seconds": 0.005, "forwards": 0.3, "forward_seconds": 0.004})
    untimed = _result("llada", "llada", "gsm8k", {"seconds": None, "forwards": None, "forward_seconds": None})
    rows = attribution_table([hf, engine, dllm, other_task, untimed])
    pairs = {(r["model"], r["baseline"]): r for r in rows}
    assert set(pairs) == {("qwen3-vllm", "qwen3"), ("refusion", "qwen3"), ("qwen3", "qwen3-vllm"),
                          ("refusion", "qwen3-vllm")}
    assert pairs[("refusion", "qwen3")]["speed_ratio"] == pytest.approx(2.0)
    assert pairs[("refusion", "qwen3")]["forwards_factor"] == pytest.approx(1 / 0.3)
    assert pairs[("refusion", "qwen3-vllm")]["note"] == NO_FORWARDS
    assert pairs[("qwen3-vllm", "qwen3")]["speed_ratio"] == pytest.approx(2.5)


def test_per_token_pieces_come_from_timed_samples_only():
    samples = [
        {"gen_tokens": 10, "nfe": 10.0, "latency_s": 1.0, "forward_s": 0.8},
        {"gen_tokens": 30, "nfe": 10.0, "latency_s": 1.0, "forward_s": 0.6},
    ]
    piece = per_token(samples)
    assert piece["seconds"] == pytest.approx(2.0 / 40)
    assert piece["forwards"] == pytest.approx(20 / 40)
    assert piece["forward_seconds"] == pytest.approx(1.4 / 40)
    no_inside = per_token([{**samples[0], "forward_s": None}, samples[1]])
    assert no_inside["forward_seconds"] is None and no_inside["forwards"] == pytest.approx(0.5)
    engine = per_token([{"gen_tokens": 5, "nfe": 0.0, "latency_s": 0.5, "forward_s": None}])
    assert engine == {"seconds": pytest.approx(0.1), "forwards": None, "forward_seconds": None}
    assert per_token([])["seconds"] is None and not math.isnan(piece["seconds"])
