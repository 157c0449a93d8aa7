"""Offline tiny models: a real architecture with a tiny config, random weights from a fixed seed, a local tokenizer.

A tiny model is written once to a cache folder in the same layout as a released checkpoint (config.json,
generation_config.json, safetensors, tokenizer files) and then loaded through exactly the same code as the real one.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from harness.files import cache_root  # a leaf: tiny models and evalplus ground truth share one cache root
from models.tokenizer import (DREAM_TOKENIZER, LLADA_TOKENIZER, QWEN3_TOKENIZER, REFUSION_TOKENIZER, TokenizerSpec,
                              build_tokenizer)

FORMAT_VERSION = "1"


@dataclass(frozen=True)
class TinyModel:
    """A recipe: tokenizer spec plus a function that writes the network for that tokenizer into a folder."""

    name: str
    tokenizer: TokenizerSpec
    write_network: Callable[[Path, object, int], None]  # (folder, tokenizer, seed) -> None
    seed: int = 0


def _write_qwen3(folder: Path, tokenizer, seed: int, extra_config: dict | None = None) -> None:
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    ids = tokenizer.convert_tokens_to_ids
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=0.2,  # larger than the real 0.02 so that greedy outputs of random weights vary
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
        bos_token_id=ids("<|endoftext|>"),
        **(extra_config or {}),
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    # Qwen3's released generation config samples by default; the adapter must switch that off explicitly.
    model.generation_config = GenerationConfig(
        do_sample=True, temperature=0.6, top_p=0.95, top_k=20,
        eos_token_id=[ids("<|im_end|>"), ids("<|endoftext|>")], pad_token_id=ids("<|endoftext|>"),
    )
    model.save_pretrained(folder)


def _write_refusion(folder: Path, tokenizer, seed: int) -> None:
    ids = tokenizer.convert_tokens_to_ids
    _write_qwen3(folder, tokenizer, seed,
                 {"mask_token_id": ids("<|mask|>")})


def _write_llada(folder: Path, tokenizer, seed: int) -> None:
    from models.networks.llada import tiny_llada_config
    from models.networks.loading import build_network, save_network

    ids = tokenizer.convert_tokens_to_ids
    config = dataclasses.replace(tiny_llada_config(len(tokenizer)), eos_token_id=ids("<|endoftext|>"),
                                 pad_token_id=ids("<|endoftext|>"), mask_token_id=ids("<|mdm_mask|>"))
    save_network(build_network(config, seed=seed), folder)


def _write_dream(folder: Path, tokenizer, seed: int) -> None:
    from models.networks.dream import tiny_dream_config
    from models.networks.loading import build_network, save_network

    ids = tokenizer.convert_tokens_to_ids
    config = dataclasses.replace(tiny_dream_config(len(tokenizer)), eos_token_id=ids("<|endoftext|>"),
                                 pad_token_id=ids("<|endoftext|>"), mask_token_id=ids("<|mask|>"))
    save_network(build_network(config, seed=seed), folder)


TINY_MODELS: dict[str, TinyModel] = {
    "tiny-qwen3": TinyModel("tiny-qwen3", QWEN3_TOKENIZER, _write_qwen3),
    "tiny-refusion": TinyModel("tiny-refusion", REFUSION_TOKENIZER, _write_refusion),
    "tiny-llada": TinyModel("tiny-llada", LLADA_TOKENIZER, _write_llada),
    "tiny-dream": TinyModel("tiny-dream", DREAM_TOKENIZER, _write_dream),
}


def materialize(name: str, root: Path | None = None) -> Path:
    """Return the folder of tiny model ``name``, building it on first use (atomically, so concurrent runs agree)."""
    recipe = TINY_MODELS[name]
    folder = (root or cache_root()) / "tiny" / f"{name}-v{FORMAT_VERSION}-seed{recipe.seed}"
    if (folder / "config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        tokenizer = build_tokenizer(recipe.tokenizer)
        tokenizer.save_pretrained(staging)
        recipe.write_network(staging, tokenizer, recipe.seed)
        try:
            staging.rename(folder)
        except OSError:  # another process won the race; its copy is identical
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
