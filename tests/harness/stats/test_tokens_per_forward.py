"""Tokens per forward is counted per sequence: an autoregressive decoder shows 1.00 at every batch size, the cost of
a batched call per row is its own figure, and records stored before rows counted their forwards are read honestly."""

from __future__ import annotations

import pytest
import torch

from harness.run.compare import Labelled, comparability_warnings, implementation_label
from harness.run.records import ResultEntry
from harness.timing.forward_timer import ForwardTimer
from harness.stats.aggregate import row_forwards, speed_figures, tokens_per_forward
from models.base import GenerationRequest, Message
from models.registry import load_adapter, spec_for

torch.set_num_threads(1)


def record(gen_tokens: int, nfe: float, batch_size: int, forwards: int | None = None) -> dict:
    out = {"gen_tokens": gen_tokens, "nfe": nfe, "batch_size": batch_size, "latency_s": 0.1,
           "gen_tokens_after_stop": gen_tokens, "canvas_tokens": 32, "hit_max_tokens": False}
    if forwards is not None:
        out["forwards"] = forwards
    return out


def test_old_records_count_only_where_the_row_was_alone():
    assert row_forwards(record(10, 10.0, 1)) == 10  # a batch of one: its share is its forwards
    assert row_forwards(record(10, 2.5, 4)) is None  # a share of batched calls is not the row's forwards
    assert tokens_per_forward([record(10, 10.0, 1), record(10, 2.5, 4)]) is None
    assert tokens_per_forward([record(10, 2.5, 4, forwards=10), record(6, 1.5, 4, forwards=3)]) == 16 / 13


@pytest.fixture(scope="module")
def qwen3():
    return load_adapter(spec_for("tiny-qwen3"), torch.device("cpu"), torch.float32)


@pytest.mark.parametrize("network", ["native", "transformers"])
def test_ar_shows_one_token_per_forward_at_batch_eight(qwen3, network):
    requests = [GenerationRequest(messages=(Message("user", "What is " + "1+" * i + "1?"),), canvas_tokens=12)
                for i in range(8)]
    config = qwen3.make_config({"network": network})
    batch = qwen3.prepare(requests, config)
    with ForwardTimer(qwen3.forward_modules(qwen3.network_for(config.runtime)), torch.device("cpu")) as timer:
        generations = qwen3.finish(batch, qwen3.decode(batch))
    assert timer.calls == max(g.forwards for g in generations)  # the timer sees every forward, on either network
    records = [{**record(g.gen_tokens, g.nfe, 8, g.forwards)} for g in generations]
    figures = speed_figures(records, 8, None)
    assert figures["tokens_per_forward"] == 1.0
    assert figures["network_calls_per_token"] < 1.0  # eight rows shared each call until they ended
    assert qwen3.implementation(config.runtime) == {"network": network, "attention": "sdpa", "compiled": False}


def test_a_speed_comparison_across_implementations_is_flagged():
    def entry(model: str, implementation: dict | None) -> Labelled:
        manifest = {} if implementation is None else {"implementation": implementation}
        return Labelled(model, None, ResultEntry(model, "gsm8k", manifest, 1, "x", {}, speed={}, diagnostics={}))

    native = {"network": "native", "attention": "sdpa", "compiled": False}
    same = comparability_warnings([entry("refusion", native), entry("qwen3", native)])
    assert not any("implementation" in w for w in same)
    mixed = comparability_warnings([entry("refusion", native),
                                    entry("qwen3", {**native, "network": "transformers"})])
    assert any("network implementation" in w and "transformers (qwen3)" in w for w in mixed)
    assert implementation_label({}) == "not recorded"
    assert implementation_label({"implementation": {**native, "compiled": True}}) == "native, compiled"
