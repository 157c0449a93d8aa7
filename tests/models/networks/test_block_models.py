"""The SDAR/TraDo and Fast-dLLM v2 kinds: the tiny recipes are written in the released formats and load through
``load_network``; released-style checkpoints that do not match fail with one line naming the tensor or field."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from models.networks.dream import DreamNetwork, DreamNetworkConfig, FastDLLMv2Config, tiny_fastdllm_v2_config
from models.networks.loading import CheckpointError, build_network, kind_of, load_network, save_network
from models.networks.qwen3 import Qwen3Network
from models.real_tokenizer import TokenizerFetchError, fetch_tokenizer
from models.tiny import materialize

torch.set_num_threads(2)


def read(folder, name: str) -> dict:
    return json.loads((folder / name).read_text())


def test_tiny_sdar_is_written_as_released():
    folder = materialize("tiny-sdar")
    config, generation = read(folder, "config.json"), read(folder, "generation_config.json")
    assert config["model_type"] == "sdar" and config["architectures"] == ["SDARForCausalLM"]
    assert config["tie_word_embeddings"] is False and "lm_head.weight" in load_file(folder / "model.safetensors")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.convert_tokens_to_ids
    assert generation["eos_token_id"] == [ids("<|endoftext|>"), ids("<|im_end|>")]
    assert config["eos_token_id"] == tokenizer.eos_token_id == ids("<|endoftext|>")
    assert tokenizer.mask_token == "<|MASK|>" and ids("<|MASK|>") == ids("</think>") + 1  # after Qwen3's, as released
    net = load_network(folder, "sdar", dtype=torch.float32)
    assert isinstance(net, Qwen3Network) and kind_of(net) == "sdar"
    assert net.config.kv_heads < net.config.num_attention_heads  # grouped-query heads, as released
    assert "<think>" in tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                      add_generation_prompt=True, enable_thinking=False)


def test_tiny_fastdllm_v2_is_written_as_released():
    folder = materialize("tiny-fastdllm-v2")
    config, generation = read(folder, "config.json"), read(folder, "generation_config.json")
    assert config["model_type"] == "Fast_dLLM_Qwen" and config["architectures"] == ["Fast_dLLM_QwenForCausalLM"]
    assert config["bd_size"] == 32
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.convert_tokens_to_ids
    assert generation["eos_token_id"][0] == config["eos_token_id"] == config["pad_token_id"] == ids("<|im_end|>")
    # the release's tokenizer and generation config pad with <|endoftext|>; only its config.json says <|im_end|>
    assert tokenizer.eos_token_id == ids("<|im_end|>")
    assert tokenizer.pad_token_id == generation["pad_token_id"] == ids("<|endoftext|>")
    assert tokenizer.mask_token == "|<MASK>|" and config["mask_token_id"] == ids("|<MASK>|")
    names = load_file(folder / "model.safetensors")
    assert "model.layers.0.self_attn.q_proj.bias" in names and "model.layers.0.self_attn.o_proj.bias" not in names
    net = load_network(folder, "fastdllm-v2", dtype=torch.float32)
    assert isinstance(net, DreamNetwork) and isinstance(net.config, FastDLLMv2Config) and net.config.bd_size == 32
    assert kind_of(net) == "fastdllm-v2"
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\nYou are Qwen") and prompt.endswith("<|im_start|>assistant\n")


def test_the_kinds_accept_only_their_model_types(tmp_path):
    for recipe, other in (("tiny-sdar", "qwen3"), ("tiny-fastdllm-v2", "dream")):
        with pytest.raises(CheckpointError, match="is model_type") as err:
            load_network(materialize(recipe), other)
        assert "\n" not in str(err.value)
    with pytest.raises(CheckpointError, match="not SDAR"):
        load_network(materialize("tiny-qwen3"), "sdar")
    with pytest.raises(CheckpointError, match="not Fast-dLLM v2"):
        load_network(materialize("tiny-dream"), "fastdllm-v2")


def broken_copy(tmp_path, recipe: str, edit) -> str:
    """The recipe's checkpoint with its tensors passed through ``edit``."""
    folder = tmp_path / recipe
    shutil.copytree(materialize(recipe), folder)
    state = load_file(folder / "model.safetensors")
    edit(state)
    save_file(state, str(folder / "model.safetensors"))
    return str(folder)


@pytest.mark.parametrize("edit, expected", [
    (lambda s: s.pop("lm_head.weight"), "missing lm_head.weight"),
    (lambda s: s.update({"model.norm.weight": torch.ones(65)}), "mis-shaped model.norm.weight [65] vs expected [64]"),
    (lambda s: s.update({"model.mask_embedding.weight": torch.ones(2)}), "unexpected model.mask_embedding.weight"),
])
def test_a_mismatched_sdar_checkpoint_fails_with_one_line(tmp_path, edit, expected):
    with pytest.raises(CheckpointError) as err:
        load_network(broken_copy(tmp_path, "tiny-sdar", edit), "sdar")
    assert expected in str(err.value) and "does not match SDAR" in str(err.value) and "\n" not in str(err.value)


def test_tied_fastdllm_v2_stores_no_head_and_refuses_one(tmp_path):
    """The 1.5B ties its head to the embedding (as Qwen2.5-1.5B): no lm_head.weight stored, one there is refused."""
    tied = build_network(tiny_fastdllm_v2_config(300, tied=True), seed=1)
    folder = save_network(tied, tmp_path / "tied")
    assert "lm_head.weight" not in load_file(folder / "model.safetensors")
    again = load_network(folder, "fastdllm-v2", dtype=torch.float32)
    ids = torch.randint(0, 300, (1, 5))
    with torch.no_grad():
        assert torch.equal(again(ids), tied(ids))
    state = load_file(folder / "model.safetensors")
    save_file({**state, "lm_head.weight": torch.zeros(300, 64)}, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="unexpected lm_head.weight"):
        load_network(folder, "fastdllm-v2")
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        DreamNetworkConfig(tie_word_embeddings=True)  # Dream itself stays untied


def test_unknown_config_fields_stay_in_extra():
    config = FastDLLMv2Config.from_dict({"model_type": "Fast_dLLM_Qwen", "bd_size": 16, "layer_types": ["full"],
                                         "auto_map": {"AutoConfig": "configuration.Fast_dLLM_QwenConfig"}})
    assert config.bd_size == 16 and config.extra["layer_types"] == ["full"] and "auto_map" in config.extra
    assert config.to_dict()["bd_size"] == 16 and config.to_dict()["layer_types"] == ["full"]
    with pytest.raises(ValueError, match="bd_size"):
        FastDLLMv2Config(bd_size=0)


def test_tiny_sdar_realtok_has_the_mask_at_its_released_id():
    try:
        fetch_tokenizer()
    except TokenizerFetchError as error:
        pytest.skip(f"real Qwen3 tokenizer unavailable: {error}")
    folder = materialize("tiny-sdar-realtok")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.convert_tokens_to_ids("<|MASK|>") == 151669
    assert read(folder, "generation_config.json")["eos_token_id"] == [151643, 151645]
    net = load_network(folder, "sdar", dtype=torch.float32)
    assert net.config.vocab_size == 151936 and not net.config.tie_word_embeddings
