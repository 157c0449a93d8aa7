"""The autoregressive baselines (Qwen3-8B, Llama-3-8B-Instruct): transformers' greedy loop, or the native Qwen3 and
Qwen2 networks run causally. The tiny Qwen3 recipes here are also the base of ReFusion's, SDAR's and the engine's."""

from __future__ import annotations

from pathlib import Path

import torch

from models.family import Family, LMEvalAlias, ModelSpec, NetworkKind, TinyModel
from models.networks.dream import DreamNetwork, Qwen2NetworkConfig
from models.networks.qwen3 import Qwen3Network, Qwen3NetworkConfig
from models.real_tokenizer import fetch_tokenizer, write_tokenizer_files
from models.tokenizer import QWEN3_CHAT_TEMPLATE, QWEN3_SPECIALS, TokenizerSpec

QWEN3_TOKENIZER = TokenizerSpec(
    special_tokens=QWEN3_SPECIALS,
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    chat_template=QWEN3_CHAT_TEMPLATE,
)

# The tiny Qwen3 shape (tiny-qwen3, tiny-refusion, tiny-sdar): 2 layers, 64 wide, 4 q heads of 16 on 2 kv heads.
QWEN3_SIZE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=4096)
# With the real ~152k vocabulary the embedding dominates, so the hidden size is halved: 152k x 32 fp32 is ~19 MB.
# The heads are 32 wide, the smallest vLLM's CPU attention serves, so the engine baseline runs on the real tokenizer.
REALTOK_SIZE = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                "head_dim": 32}


def qwen3_model(tokenizer, seed: int, extra_config: dict | None = None):
    """A random tiny transformers Qwen3ForCausalLM with Qwen3's released (sampling) generation config."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    ids = tokenizer.convert_tokens_to_ids
    settings = dict(
        vocab_size=len(tokenizer),
        **QWEN3_SIZE,
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
    return model


def _qwen3_realtok(tokenizer, seed: int):
    # Qwen3's config has 151936 embedding rows, more than the tokenizer's 151669 ids.
    return qwen3_model(tokenizer, seed, {**REALTOK_SIZE, "vocab_size": 151936})


def real_qwen3_tokenizer(folder: Path, cache: Path, added: tuple[str, ...] = ()) -> None:
    """The released Qwen3 tokenizer files (models/real_tokenizer.py), with ``added`` tokens after its own."""
    write_tokenizer_files(fetch_tokenizer(cache), folder, added)


_THINKING_OFF = {"enable_thinking": False}
# Qwen3's technical report (Table 18, non-thinking) samples at T 0.7, top-p 0.8, top-k 20 and averages AIME over 64
# samples an item and GPQA-Diamond over 10. Its presence penalty of 1.5 has no option here, and the ReFusion table's
# Qwen3 row (the seven tasks) decodes greedily, so the preset leaves those alone.
_QWEN3_SAMPLED = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20}
QWEN3_PAPER = {"aime24": {**_QWEN3_SAMPLED, "samples": 64}, "aime25": {**_QWEN3_SAMPLED, "samples": 64},
               "gpqa_diamond": {**_QWEN3_SAMPLED, "samples": 10}}

FAMILY = Family(
    name="ar",
    adapters={"ar": "models.adapters.ar:ARAdapter"},
    networks={
        "qwen3": NetworkKind(Qwen3NetworkConfig, Qwen3Network, "Qwen3", frozenset({"qwen3"})),
        "qwen2": NetworkKind(Qwen2NetworkConfig, DreamNetwork, "Qwen2", frozenset({"qwen2"})),
    },
    tiny=(
        TinyModel("tiny-qwen3", QWEN3_TOKENIZER, qwen3_model),
        TinyModel("tiny-qwen3-realtok", None, _qwen3_realtok, write_tokenizer=real_qwen3_tokenizer),
    ),
    models=(
        ModelSpec("qwen3", "ar", "Qwen/Qwen3-8B", "Qwen3-8B, autoregressive baseline (greedy, thinking off)",
                  _THINKING_OFF, presets={"paper": QWEN3_PAPER}),
        ModelSpec("llama3", "ar", "meta-llama/Meta-Llama-3-8B-Instruct",
                  "Llama-3-8B-Instruct, autoregressive baseline (greedy)", {"enable_thinking": None}),
        ModelSpec("tiny-qwen3", "ar", "tiny-qwen3", "offline: random tiny Qwen3 with a local tokenizer", _THINKING_OFF,
                  presets={"paper": QWEN3_PAPER}),
        ModelSpec("tiny-qwen3-realtok", "ar", "tiny-qwen3-realtok",
                  "offline once fetched: random tiny Qwen3 with the released Qwen3 tokenizer (npm)", _THINKING_OFF),
    ),
    lm_eval=(LMEvalAlias("qwen3-harness", "qwen3", "Qwen3LM"),),
)
