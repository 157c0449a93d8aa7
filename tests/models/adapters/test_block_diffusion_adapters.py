"""The block-diffusion adapters (SDAR/TraDo and Fast-dLLM v2) on their tiny checkpoints: the chat template each
family renders, ids cut at its end-of-sequence tokens, options and presets as the registry states them, and the
checkpoint's bd_size as Fast-dLLM v2's block length."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from models.base import GenerationRequest, Message
from models.decoders.contract import ConfigError
from models.registry import MODELS, ModelSpec, load_adapter, spec_for
from models.sources import resolve_source
from tasks.registry import PAPER_TASKS, task_names

CPU = torch.device("cpu")
FAMILIES = ("tiny-sdar", "tiny-fastdllm-v2")
REQUESTS = [GenerationRequest(messages=(Message("user", q),), canvas_tokens=24)
            for q in ("What is 2 + 2?", "A much longer question about apples, pears and 17 oranges?", "Hi")]


@pytest.fixture(scope="module", params=FAMILIES)
def adapter(request):
    return load_adapter(spec_for(request.param), CPU, torch.float32)


def test_prepare_renders_each_familys_chat_template():
    sdar = load_adapter(spec_for("tiny-sdar"), CPU, torch.float32)
    v2 = load_adapter(spec_for("tiny-fastdllm-v2"), CPU, torch.float32)
    question = REQUESTS[0].messages[0].content
    # Qwen3's template, thinking switch left to the template (as SDAR's generate.py renders it): no think block.
    (sdar_prompt,) = sdar.prepare(REQUESTS[:1], sdar.make_config()).prompts
    assert sdar_prompt == f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    # Qwen2.5's template with its default system turn.
    batch = v2.prepare(REQUESTS[:1], v2.make_config())
    system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert batch.prompts[0] == (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
                                "<|im_start|>assistant\n")
    assert batch.input_ids[0].tolist() == v2.tokenizer(batch.prompts[0], add_special_tokens=False)["input_ids"]


def test_token_ids_are_the_familys_own(adapter):
    ids = adapter.tokenizer.convert_tokens_to_ids
    expected = {"sdar": ("<|MASK|>", ["<|endoftext|>", "<|im_end|>"]),
                "fastdllm-v2": ("|<MASK>|", ["<|im_end|>", "<|endoftext|>"])}[adapter.kind]
    assert adapter.token_ids() == {"mask_id": ids(expected[0]), "eos_ids": tuple(ids(expected[1]))}
    assert adapter.pad_id() == ids("<|endoftext|>")  # both releases' tokenizers pad with it


def test_batched_equals_alone_and_ids_stop_at_the_first_eos(adapter):
    config = adapter.make_config()
    batched = adapter.generate(REQUESTS, config)
    eos = set(adapter.eos_ids())
    for request, row in zip(REQUESTS, batched):
        assert row.token_ids == adapter.generate([request], config)[0].token_ids
        assert row.gen_tokens == len(row.token_ids) <= request.canvas_tokens
        assert not eos & set(row.token_ids[:-1]) and row.hit_max_tokens == (not eos & set(row.token_ids))


def test_decode_cuts_after_the_first_end_of_sequence(adapter, monkeypatch):
    """Made an end-of-sequence token, a token the model generates ends the output right after its first place."""
    config = adapter.make_config()
    (free,) = adapter.generate(REQUESTS[1:2], config)
    ordinary = [t for t in free.token_ids if t not in adapter.tokenizer.all_special_ids]
    stop = ordinary[len(ordinary) // 2]
    monkeypatch.setattr(adapter, "eos_tokens", (*adapter.eos_tokens, adapter.tokenizer.convert_ids_to_tokens(stop)))
    (cut,) = adapter.generate(REQUESTS[1:2], config)
    assert cut.token_ids == free.token_ids[:free.token_ids.index(stop) + 1] and not cut.hit_max_tokens


def test_options_coerce_and_bad_values_are_one_line(adapter):
    config = adapter.make_config({"remasking": "low_confidence_dynamic", "confidence_threshold": "0.7",
                                  "temperature": "0"})
    assert (config.decoder.remasking, config.decoder.confidence_threshold) == ("low_confidence_dynamic", 0.7)
    with pytest.raises(ConfigError, match="remasking") as error:
        adapter.make_config({"remasking": "lowest_confidence"})
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="denoising_steps"):
        adapter.make_config({"block_length": 4, "denoising_steps": 8}, canvas=24)


def test_registry_defaults_follow_the_official_evaluations():
    decoder = {name: load_adapter(spec_for(name), CPU, torch.float32).default_config().decoder
               for name in ("tiny-sdar", "tiny-fastdllm-v2")}
    sdar, v2 = decoder["tiny-sdar"], decoder["tiny-fastdllm-v2"]
    assert (sdar.block_length, sdar.denoising_steps, sdar.remasking, sdar.temperature) == (
        4, 4, "low_confidence_static", 0.0)
    assert (v2.block_length, v2.sub_block_length, v2.remasking, v2.confidence_threshold, v2.temperature) == (
        32, 8, "threshold_plus_best", 0.9, 0.0)
    assert v2.logit_shift and v2.first_token_from_commit and not v2.commit_finished_block
    assert MODELS["trado-8b"].defaults["remasking"] == "low_confidence_dynamic"
    assert MODELS["trado-8b"].defaults["confidence_threshold"] == 0.9


@pytest.mark.parametrize("name, preset, task, expected", [
    ("sdar-8b", "paper", "math", {"remasking": "low_confidence_static", "block_length": 4, "denoising_steps": 4,
                                  "gen_length": 4096}),  # eval_sdar_hf.py
    ("trado-8b", "paper", "gsm8k", {"remasking": "low_confidence_dynamic", "confidence_threshold": 0.9,
                                    "temperature": 1.0, "gen_length": 2000}),  # trado_eval.yaml samples
    ("fastdllm-v2-7b", "paper", "gsm8k", {"confidence_threshold": 1.0}),
    ("fastdllm-v2-7b", "paper", "math", {"confidence_threshold": 1.0}),
    ("fastdllm-v2-7b", "paper", "mbpp", {"confidence_threshold": 0.9}),
    ("fastdllm-v2-1.5b", "readme", "gsm8k", {"confidence_threshold": 0.9}),
    # the 2026 benchmarks each paper reports, with its evaluation's settings
    ("sdar-8b", "paper", "ifeval", {"remasking": "low_confidence_static", "gen_length": 4096}),  # SDAR Table 1
    ("trado-8b", "paper", "aime24", {"temperature": 1.0, "gen_length": 2000}),  # TraDo Table 2
    ("trado-8b", "paper", "livecodebench", {"remasking": "low_confidence_dynamic", "gen_length": 2000}),
    ("llada2-mini", "paper", "aime25", {"block_length": 32, "confidence_threshold": 0.95, "temperature": 0.0}),
    ("llada2-mini", "paper", "livecodebench_v6", {"block_length": 32, "confidence_threshold": 0.95}),
    ("dream-coder", "paper", "livecodebench_v6", {"gen_length": 768}),  # code_eval README
    ("dream-coder", "paper", "humaneval_plus", {"gen_length": 512}),
])
def test_presets_resolve_per_task(name, preset, task, expected):
    assert expected.items() <= spec_for(name).overrides_for(task, preset).items()


def test_presets_cover_the_seven_tasks_and_reach_the_config():
    for name in ("sdar-8b", "trado-8b", "fastdllm-v2-7b", "tiny-sdar", "tiny-fastdllm-v2", "llada2-mini"):
        for preset in MODELS[name].presets.values():
            assert tuple(preset)[:len(PAPER_TASKS)] == PAPER_TASKS, name
    assert not set(spec_for("trado-8b").presets["paper"]) & {"aime25", "ifeval", "bbh"}  # not in its paper
    v2 = load_adapter(spec_for("tiny-fastdllm-v2"), CPU, torch.float32)
    spec = spec_for("tiny-fastdllm-v2")
    assert v2.make_config(spec.overrides_for("gsm8k", "paper")).decoder.confidence_threshold == 1.0
    assert v2.make_config(spec.overrides_for("gsm8k", "readme")).decoder.confidence_threshold == 0.9


def test_every_preset_names_registry_tasks():
    for spec in MODELS.values():
        for preset in spec.presets.values():
            assert set(preset) <= set(task_names()), spec.name


def _copy_of(recipe: str, folder, **config_changes):
    """A local checkpoint folder: the tiny recipe's files with config.json changed."""
    shutil.copytree(resolve_source(recipe).path, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
    return str(folder)


def test_fastdllm_v2_block_length_is_the_checkpoints_bd_size(tmp_path):
    folder = _copy_of("tiny-fastdllm-v2", tmp_path / "v2", bd_size=16)
    spec = ModelSpec("local-v2", "fastdllm-v2", folder, "test", MODELS["tiny-fastdllm-v2"].defaults)
    adapter = load_adapter(spec, CPU, torch.float32)
    assert adapter.default_config().decoder.block_length == 16
    assert adapter.make_config({"block_length": 8}).decoder.block_length == 8  # an option still wins
    not_v2 = ModelSpec("local-sdar", "fastdllm-v2", resolve_source("tiny-sdar").path, "test")
    with pytest.raises(ConfigError, match="model_type 'sdar'"):
        load_adapter(not_v2, CPU, torch.float32)


def test_the_forward_timer_sees_every_block_forward(adapter):
    """The decoder calls ``block_forward``, not ``forward``: each call must still be one timed network call."""
    from harness.timing.forward_timer import ForwardTimer, timed_network

    batch = adapter.prepare(REQUESTS[:1], adapter.make_config())
    with ForwardTimer(timed_network(adapter, batch.config), CPU) as timer:
        (result,) = adapter.decode(batch)
    assert timer.calls == result.nfe > 0 and timer.seconds() > 0
