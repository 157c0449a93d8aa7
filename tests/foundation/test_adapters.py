"""Adapters on the tiny offline models: real tokenizers, real networks, real chat templates."""

from __future__ import annotations

import hashlib

import pytest
import torch

from models.base import GenerationRequest, Message
from models.loading import resolve_source
from models.registry import load_adapter, spec_for
from models.tiny import materialize

CPU = torch.device("cpu")


def chat(question: str, canvas: int = 24, prefill: str | None = None) -> GenerationRequest:
    turns = [Message("user", question)] + ([Message("assistant", prefill)] if prefill else [])
    return GenerationRequest(messages=tuple(turns), canvas_tokens=canvas)


REQUESTS = [chat("What is 2 + 2?"), chat("A much longer question about apples, pears and 17 oranges?"),
            chat("Pick one.", prefill="The best answer is")]


@pytest.fixture(scope="module", params=["tiny-qwen3", "tiny-llada", "tiny-dream"])
def adapter(request):
    return load_adapter(spec_for(request.param), CPU, torch.float32)


def test_batched_left_padded_equals_unbatched(adapter):
    config = adapter.make_config({"steps": 12} if adapter.name != "tiny-qwen3" else {})
    batched = adapter.generate(REQUESTS, config)
    for request, row in zip(REQUESTS, batched):
        (alone,) = adapter.generate([request], config)
        assert row.token_ids == alone.token_ids
        assert row.gen_tokens == len(row.token_ids) <= request.canvas_tokens


def test_generation_accounting(adapter):
    (gen,) = adapter.generate([REQUESTS[0]], adapter.make_config())
    eos = set(adapter.eos_ids())
    assert gen.hit_max_tokens == (not eos & set(gen.token_ids))
    assert all(t not in eos for t in gen.token_ids[:-1])
    assert gen.nfe >= 1 and gen.canvas_tokens == 24


def test_thinking_switch_and_prefill_render_as_qwen3_does():
    adapter = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32)
    off = adapter.render(REQUESTS[0], adapter.make_config({"enable_thinking": False}))
    on = adapter.render(REQUESTS[0], adapter.make_config({"enable_thinking": True}))
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n")
    prefilled = adapter.render(REQUESTS[2], adapter.make_config())
    assert prefilled.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nThe best answer is")
    assert adapter.eos_ids() == adapter.tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])


def test_llada_template_starts_with_bos_once():
    adapter = load_adapter(spec_for("tiny-llada"), CPU, torch.float32)
    batch = adapter.prepare([REQUESTS[0]], adapter.make_config())
    bos = adapter.tokenizer.convert_tokens_to_ids("<|startoftext|>")
    assert batch.input_ids[0].tolist().count(bos) == 1 and batch.input_ids[0, 0] == bos


def test_tiny_models_are_deterministic_and_load_like_checkpoints(tmp_path):
    first, second = materialize("tiny-qwen3", tmp_path / "a"), materialize("tiny-qwen3", tmp_path / "b")
    digest = lambda folder: hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert digest(first) == digest(second)
    by_name = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32)
    by_path = load_adapter(spec_for(f"hf:{resolve_source('tiny-qwen3').path}"), CPU, torch.float32)
    config = by_name.make_config()
    assert by_name.generate(REQUESTS[:1], config)[0].token_ids == by_path.generate(REQUESTS[:1], config)[0].token_ids
