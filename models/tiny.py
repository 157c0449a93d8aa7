"""Offline tiny models: a real architecture with a tiny config, random weights from a fixed seed, a local tokenizer.

A tiny model is written once to a cache folder in the same layout as a released checkpoint (config.json,
generation_config.json, safetensors, tokenizer files) and then loaded through exactly the same code as the real one.
The ``-realtok`` models carry the released Qwen3 tokenizer files instead (models/real_tokenizer.py) and the real
vocabulary size.

A local tokenizer holds only the special tokens a model family uses, in the release's order, at ids 0, 1, ...; so a
mask token sits at its released id only on a ``-realtok`` model (``tiny-sdar-realtok``: ``<|MASK|>`` = 151669).
Callers read every id by its token string, as for a real checkpoint.
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
from models.real_tokenizer import REFUSION_ADDED_TOKENS, fetch_tokenizer, write_tokenizer_files
from models.tokenizer import (DREAM_TOKENIZER, FASTDLLM_V2_TOKENIZER, GEMMA4_TOKENIZER, LLADA2_TOKENIZER,
                              LLADA_TOKENIZER, QWEN3_TOKENIZER, REFUSION_TOKENIZER, SDAR_TOKENIZER, TokenizerSpec,
                              build_tokenizer)

FORMAT_VERSION = "3"  # bumped when a recipe changes, so no cached copy of the old one is read


@dataclass(frozen=True)
class TinyModel:
    """A recipe: tokenizer spec plus a function that writes the network for that tokenizer into a folder."""

    name: str
    tokenizer: TokenizerSpec | None
    write_network: Callable[[Path, object, int], None]  # (folder, tokenizer, seed) -> None
    seed: int = 0
    # Instead of a local tokenizer: writes released tokenizer files into the folder, (folder, cache root) -> None.
    write_tokenizer: Callable[[Path, Path], None] | None = None


# The tiny Qwen3 shape (tiny-qwen3, tiny-refusion, tiny-sdar): 2 layers, 64 wide, 4 q heads of 16 on 2 kv heads.
_QWEN3_SIZE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, max_position_embeddings=4096)


def _write_qwen3(folder: Path, tokenizer, seed: int, extra_config: dict | None = None) -> None:
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    ids = tokenizer.convert_tokens_to_ids
    settings = dict(
        vocab_size=len(tokenizer),
        **_QWEN3_SIZE,
        tie_word_embeddings=True,
        initializer_range=0.2,  # larger than the real 0.02 so that greedy outputs of random weights vary
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
        bos_token_id=ids("<|endoftext|>"),
    )
    config = Qwen3Config(**{**settings, **(extra_config or {})})
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    # Qwen3's released generation config samples by default; the adapter must switch that off explicitly.
    model.generation_config = GenerationConfig(
        do_sample=True, temperature=0.6, top_p=0.95, top_k=20,
        eos_token_id=[ids("<|im_end|>"), ids("<|endoftext|>")], pad_token_id=ids("<|endoftext|>"),
    )
    model.save_pretrained(folder)


def _write_qwen3_h32(folder: Path, tokenizer, seed: int) -> None:
    """tiny-qwen3 with 32-wide heads: vLLM's CPU attention serves head sizes 32, 64, 80, ... only."""
    _write_qwen3(folder, tokenizer, seed, {"head_dim": 32})


def _write_refusion(folder: Path, tokenizer, seed: int) -> None:
    ids = tokenizer.convert_tokens_to_ids
    _write_qwen3(folder, tokenizer, seed,
                 {"mask_token_id": ids("<|mask|>")})


# With the real ~152k vocabulary the embedding dominates, so the hidden size is halved: 152k x 32 fp32 is ~19 MB.
# The heads are 32 wide, the smallest vLLM's CPU attention serves, so the engine baseline runs on the real tokenizer.
_REALTOK_SIZE = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                 "head_dim": 32}


def _write_qwen3_realtok(folder: Path, tokenizer, seed: int) -> None:
    # Qwen3's config has 151936 embedding rows, more than the tokenizer's 151669 ids.
    _write_qwen3(folder, tokenizer, seed, {**_REALTOK_SIZE, "vocab_size": 151936})


def _write_refusion_realtok(folder: Path, tokenizer, seed: int) -> None:
    # ReFusion resized its embeddings to the tokenizer (151671) and set bos/mask to its two added tokens.
    ids = tokenizer.convert_tokens_to_ids
    _write_qwen3(folder, tokenizer, seed, {**_REALTOK_SIZE, "bos_token_id": ids("<|beginoftext|>"),
                                           "mask_token_id": ids("<|mask|>")})


def _real_qwen3_tokenizer(folder: Path, cache: Path) -> None:
    write_tokenizer_files(fetch_tokenizer(cache), folder)


def _real_refusion_tokenizer(folder: Path, cache: Path) -> None:
    write_tokenizer_files(fetch_tokenizer(cache), folder, REFUSION_ADDED_TOKENS)


def _write_llada(folder: Path, tokenizer, seed: int) -> None:
    from models.networks.llada import tiny_llada_config
    from models.networks.loading import build_network, save_network

    ids = tokenizer.convert_tokens_to_ids
    config = dataclasses.replace(tiny_llada_config(len(tokenizer)), eos_token_id=ids("<|endoftext|>"),
                                 pad_token_id=ids("<|endoftext|>"), mask_token_id=ids("<|mdm_mask|>"))
    save_network(build_network(config, seed=seed), folder)


def _write_generation_config(folder: Path, tokenizer, bos: str, eos: list[str], pad: str) -> None:
    """generation_config.json with the ids of these tokens (the native networks' save_network writes none)."""
    from transformers import GenerationConfig

    ids = tokenizer.convert_tokens_to_ids
    GenerationConfig(bos_token_id=ids(bos), eos_token_id=[ids(t) for t in eos], pad_token_id=ids(pad)).save_pretrained(
        folder)


def _write_sdar(folder: Path, tokenizer, seed: int, size: dict | None = None) -> None:
    """SDAR/TraDo as released: a Qwen3 network under model_type "sdar", untied head (even at 4B), generation ending at
    <|endoftext|> or <|im_end|>."""
    from models.networks.loading import build_network, save_network
    from models.networks.qwen3 import Qwen3NetworkConfig

    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    shape = {**_QWEN3_SIZE, "vocab_size": len(tokenizer), **(size or {})}
    config = Qwen3NetworkConfig(**shape, rope_theta=1000000.0, tie_word_embeddings=False, model_type="sdar",
                                extra={"architectures": ["SDARForCausalLM"], "bos_token_id": eos,
                                       "eos_token_id": eos, "pad_token_id": eos})
    save_network(build_network(config, seed=seed), folder)
    _write_generation_config(folder, tokenizer, "<|endoftext|>", ["<|endoftext|>", "<|im_end|>"], "<|endoftext|>")


def _write_sdar_realtok(folder: Path, tokenizer, seed: int) -> None:
    # Qwen3's 151936 embedding rows; <|MASK|> is the first id after the released tokenizer's 151669.
    _write_sdar(folder, tokenizer, seed, {**_REALTOK_SIZE, "vocab_size": 151936})


def _real_sdar_tokenizer(folder: Path, cache: Path) -> None:
    write_tokenizer_files(fetch_tokenizer(cache), folder, ("<|MASK|>",))


def _write_fastdllm_v2(folder: Path, tokenizer, seed: int) -> None:
    """Fast-dLLM v2 7B as released (Qwen2 names, untied, bd_size 32): config.json's pad = eos = <|im_end|>,
    generation_config.json's pad <|endoftext|> (the tokenizer's too), mask |<MASK>|."""
    from models.networks.dream import tiny_fastdllm_v2_config
    from models.networks.loading import build_network, save_network

    ids = tokenizer.convert_tokens_to_ids
    config = dataclasses.replace(tiny_fastdllm_v2_config(len(tokenizer)), bos_token_id=ids("<|endoftext|>"),
                                 eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|im_end|>"),
                                 mask_token_id=ids("|<MASK>|"))
    save_network(build_network(config, seed=seed), folder)
    _write_generation_config(folder, tokenizer, "<|endoftext|>", ["<|im_end|>", "<|endoftext|>"], "<|endoftext|>")


def _write_llada2(folder: Path, tokenizer, seed: int) -> None:
    """LLaDA2.0-mini's layout (LLaDA2MoeModelLM, model_type llada2_moe) at tiny size; text ends at <|endoftext|>,
    masks are <|mask|>, as the published generate's eos_id / mask_id."""
    from models.networks.llada2 import tiny_llada2_config
    from models.networks.loading import build_network, save_network

    config = tiny_llada2_config(len(tokenizer) + 1)  # one more row: the published embedding's padding id
    save_network(build_network(config, seed=seed), folder)
    _write_generation_config(folder, tokenizer, "<|startoftext|>", ["<|endoftext|>"], "<|endoftext|>")


def _write_dream(folder: Path, tokenizer, seed: int) -> None:
    from models.networks.dream import tiny_dream_config
    from models.networks.loading import build_network, save_network

    ids = tokenizer.convert_tokens_to_ids
    config = dataclasses.replace(tiny_dream_config(len(tokenizer)), eos_token_id=ids("<|endoftext|>"),
                                 pad_token_id=ids("<|endoftext|>"), mask_token_id=ids("<|mask|>"))
    save_network(build_network(config, seed=seed), folder)


def _write_diffusion_gemma(folder: Path, tokenizer, seed: int) -> None:
    """DiffusionGemma in the release's format (text and vision configs, the release's generation_config.json with
    this tokenizer's ids): 2 layers, sliding then full attention (the last must be full), a 4-expert top-2 mixture,
    the tiny vision tower the config requires, and a 16-token canvas (the release's is 256) so CPU tests stay short."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    from models.decoders.diffusion_gemma import DiffusionGemmaOptions, generation_config

    ids = tokenizer.convert_tokens_to_ids
    text = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
                layer_types=["sliding_attention", "full_attention"], sliding_window=64, num_experts=4,
                top_k_experts=2, moe_intermediate_size=32, max_position_embeddings=4096,
                pad_token_id=ids("<pad>"), eos_token_id=ids("<eos>"), bos_token_id=ids("<bos>"))
    vision = dict(model_type="gemma4_vision", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, head_dim=16)
    torch.manual_seed(seed)
    network = DiffusionGemmaForBlockDiffusion(
        DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=16)).eval()
    release = DiffusionGemmaOptions(max_new_tokens=256, eos_ids=tuple(ids(["<eos>", "<turn|>", "<|tool_response>"])),
                                    pad_id=ids("<pad>"))  # the options' defaults are the release's generation config
    network.generation_config = generation_config(release)
    network.save_pretrained(folder)


TINY_MODELS: dict[str, TinyModel] = {
    "tiny-qwen3": TinyModel("tiny-qwen3", QWEN3_TOKENIZER, _write_qwen3),
    "tiny-qwen3-h32": TinyModel("tiny-qwen3-h32", QWEN3_TOKENIZER, _write_qwen3_h32),
    "tiny-refusion": TinyModel("tiny-refusion", REFUSION_TOKENIZER, _write_refusion),
    "tiny-llada": TinyModel("tiny-llada", LLADA_TOKENIZER, _write_llada),
    "tiny-dream": TinyModel("tiny-dream", DREAM_TOKENIZER, _write_dream),
    "tiny-qwen3-realtok": TinyModel("tiny-qwen3-realtok", None, _write_qwen3_realtok,
                                    write_tokenizer=_real_qwen3_tokenizer),
    "tiny-refusion-realtok": TinyModel("tiny-refusion-realtok", None, _write_refusion_realtok,
                                       write_tokenizer=_real_refusion_tokenizer),
    "tiny-sdar": TinyModel("tiny-sdar", SDAR_TOKENIZER, _write_sdar),
    "tiny-sdar-realtok": TinyModel("tiny-sdar-realtok", None, _write_sdar_realtok,
                                   write_tokenizer=_real_sdar_tokenizer),
    "tiny-fastdllm-v2": TinyModel("tiny-fastdllm-v2", FASTDLLM_V2_TOKENIZER, _write_fastdllm_v2),
    "tiny-llada2": TinyModel("tiny-llada2", LLADA2_TOKENIZER, _write_llada2),
    "tiny-diffusiongemma": TinyModel("tiny-diffusiongemma", GEMMA4_TOKENIZER, _write_diffusion_gemma),
}


def materialize(name: str, root: Path | None = None) -> Path:
    """Return the folder of tiny model ``name``, building it on first use (atomically, so concurrent runs agree)."""
    recipe = TINY_MODELS[name]
    root = root or cache_root()
    folder = root / "tiny" / f"{name}-v{FORMAT_VERSION}-seed{recipe.seed}"
    if (folder / "config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        if recipe.write_tokenizer is not None:
            from transformers import AutoTokenizer

            recipe.write_tokenizer(staging, root)
            tokenizer = AutoTokenizer.from_pretrained(staging)  # as a checkpoint folder's tokenizer is read
        else:
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
