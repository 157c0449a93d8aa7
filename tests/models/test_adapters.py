"""Adapters on the tiny offline models: real tokenizers, real networks, real chat templates."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from models.decoders.contract import ConfigError
from models.sources import resolve_source
from models.registry import load_adapter, spec_for
from models.tiny import materialize
from adapter_cases import CASES, REQUESTS, chat

CPU = torch.device("cpu")


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    adapter = load_adapter(spec_for(request.param), CPU, torch.float32)
    return adapter, adapter.make_config(CASES[request.param])


def test_batched_left_padded_equals_unbatched(case):
    adapter, config = case
    batched = adapter.generate(REQUESTS, config)
    for request, row in zip(REQUESTS, batched):
        (alone,) = adapter.generate([request], config)
        assert row.token_ids == alone.token_ids
        assert row.gen_tokens == len(row.token_ids) <= request.canvas_tokens


def test_generation_accounting(case):
    adapter, config = case
    (gen,) = adapter.generate([REQUESTS[0]], config)
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


def test_paper_preset_reaches_the_decoder_and_the_manifest(tmp_path):
    from harness.cli import main

    status = main(["--models", "tiny-refusion", "--tasks", "gsm8k", "--data", "fixtures", "--preset", "paper",
                   "--gen-length", "128", "--limit", "1", "--output", str(tmp_path), "--no-progress"])
    assert status == 0
    manifest = json.loads((tmp_path / "results.json").read_text())["results"][0]["manifest"]
    assert manifest["canvas_tokens"] == 128  # --gen-length wins over the preset's 512
    assert {k: manifest["decoding"][k] for k in ("slot_size", "serial_num_blocks", "slot_threshold",
                                                 "token_threshold")} == {"slot_size": 32, "serial_num_blocks": 4,
                                                                         "slot_threshold": 0.9, "token_threshold": 0.4}


def test_invalid_refusion_split_is_one_clear_line():
    adapter = load_adapter(spec_for("tiny-refusion"), CPU, torch.float32)
    with pytest.raises(ConfigError, match="does not split"):
        adapter.generate([chat("q", canvas=36)], adapter.make_config({"slot_size": 8, "serial_num_blocks": 2}))
    with pytest.raises(ConfigError, match="threshold"):
        adapter.make_config({"slot_threshold": 1.5}, canvas=32)
