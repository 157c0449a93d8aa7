"""SDAR and TraDo (JetLM/SDAR-*-Chat, Gen-Verse/TraDo-*-Instruct): Qwen3 turned block diffusion, the native Qwen3
network under a block-causal mask (model_type "sdar"), decoded by models/decoders/block_diffusion."""

from __future__ import annotations

from functools import partial

from models.families.ar import QWEN3_SIZE, REALTOK_SIZE, real_qwen3_tokenizer
from models.family import (LIVECODEBENCH_TASK_NAMES, Family, GenerationTokens, LMEvalAlias, ModelSpec, NetworkKind,
                           TinyModel, every_task)
from models.networks.qwen3 import Qwen3Network, Qwen3NetworkConfig
from models.tokenizer import QWEN3_CHAT_TEMPLATE, QWEN3_SPECIALS, TokenizerSpec

# SDAR / TraDo: Qwen3's tokenizer and template with <|MASK|> added after </think> (id 151669 in the release, the last
# special here); generation ends at <|endoftext|>, a chat turn at <|im_end|>.
SDAR_TOKENIZER = TokenizerSpec(
    special_tokens=QWEN3_SPECIALS + ("<|MASK|>",),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    mask_token="<|MASK|>",
    chat_template=QWEN3_CHAT_TEMPLATE,
)

# SDAR's OpenCompass evaluation (JetAstra/SDAR evaluation/, docs/decoders.md §7): blocks of 4, 4 denoising steps,
# greedy (its top_k 1), static low-confidence remasking; the chat template rendered with its own default (no thinking
# switch), as SDAR's generate.py renders it.
SDAR = {"enable_thinking": None, "temperature": 0.0, "block_length": 4, "denoising_steps": 4,
        "remasking": "low_confidence_static"}
# TraDo's evaluation (Gen-Verse/dLLM-RL configs/trado_eval.yaml): the same blocks, dynamic low-confidence remasking
# above 0.9. By default greedy, like every other entry, so runs compare token for token; that evaluation samples (T 1,
# no top-k or top-p, three answers per item, its figures their mean), which --preset paper does: T 1 and three samples
# an item, each with its own seed.
TRADO = {**SDAR, "remasking": "low_confidence_dynamic", "confidence_threshold": 0.9}
# The block-diffusion options a paper preset sets on every task (LLaDA2's too).
BLOCK_DECODING = ("block_length", "denoising_steps", "remasking", "temperature")
# The canvases are the evaluations' own: SDAR's eval_sdar_hf.py gen_length 4096, trado_eval.yaml max_token 2000.
# Beyond the seven: SDAR's Table 1 reports IFEval and MATH500, TraDo's Table 2 MATH500, AIME 2024 and
# LiveCodeBench(-v2), each from the same evaluation.
SDAR_PAPER = every_task({**{k: SDAR[k] for k in BLOCK_DECODING}, "gen_length": 4096}, also=("ifeval", "math500"))
TRADO_PAPER = every_task({**{k: TRADO[k] for k in (*BLOCK_DECODING, "confidence_threshold")}, "temperature": 1.0,
                          "gen_length": 2000, "samples": 3}, also=("math500", "aime24", *LIVECODEBENCH_TASK_NAMES))
_SDAR_PRESETS = {"paper": SDAR_PAPER}
_TRADO_PRESETS = {"paper": TRADO_PAPER}
_SDAR_WHERE = "blocks of 4 in 4 greedy steps, static low-confidence (SDAR's OpenCompass evaluation)"
_TRADO_WHERE = ("blocks of 4 in 4 greedy steps, dynamic low-confidence above 0.9 (TraDo's evaluation, which samples: "
                "--preset paper, T 1)")


def _tiny_sdar(tokenizer, seed: int, size: dict | None = None) -> Qwen3NetworkConfig:
    """SDAR/TraDo as released: a Qwen3 network under model_type "sdar", untied head (even at 4B), generation ending at
    <|endoftext|> or <|im_end|>."""
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    shape = {**QWEN3_SIZE, "vocab_size": len(tokenizer), **(size or {})}
    return Qwen3NetworkConfig(**shape, rope_theta=1000000.0, tie_word_embeddings=False, model_type="sdar",
                              extra={"architectures": ["SDARForCausalLM"], "bos_token_id": eos,
                                     "eos_token_id": eos, "pad_token_id": eos})


def _tiny_sdar_realtok(tokenizer, seed: int) -> Qwen3NetworkConfig:
    # Qwen3's 151936 embedding rows; <|MASK|> is the first id after the released tokenizer's 151669.
    return _tiny_sdar(tokenizer, seed, {**REALTOK_SIZE, "vocab_size": 151936})


_GENERATION = GenerationTokens("<|endoftext|>", ("<|endoftext|>", "<|im_end|>"), "<|endoftext|>")


FAMILY = Family(
    name="sdar",
    adapters={"sdar": "models.adapters.block_diffusion:SDARAdapter"},
    networks={"sdar": NetworkKind(Qwen3NetworkConfig, Qwen3Network, "SDAR", frozenset({"sdar"}))},
    tiny=(
        TinyModel("tiny-sdar", SDAR_TOKENIZER, _tiny_sdar, _GENERATION),
        TinyModel("tiny-sdar-realtok", None, _tiny_sdar_realtok, _GENERATION,
                  write_tokenizer=partial(real_qwen3_tokenizer, added=("<|MASK|>",))),
    ),
    models=(
        ModelSpec("sdar-8b", "sdar", "JetLM/SDAR-8B-Chat",
                  f"SDAR-8B-Chat, Qwen3-8B turned block diffusion; {_SDAR_WHERE}", SDAR, _SDAR_PRESETS),
        ModelSpec("sdar-4b", "sdar", "JetLM/SDAR-4B-Chat",
                  f"SDAR-4B-Chat, Qwen3-4B turned block diffusion; {_SDAR_WHERE}", SDAR, _SDAR_PRESETS),
        ModelSpec("sdar-1.7b", "sdar", "JetLM/SDAR-1.7B-Chat",
                  f"SDAR-1.7B-Chat, Qwen3-1.7B turned block diffusion; {_SDAR_WHERE}", SDAR, _SDAR_PRESETS),
        ModelSpec("trado-8b", "sdar", "Gen-Verse/TraDo-8B-Instruct",
                  f"TraDo-8B-Instruct, SDAR-8B-Chat after RL (TraceRL): {_TRADO_WHERE}", TRADO, _TRADO_PRESETS),
        ModelSpec("trado-4b", "sdar", "Gen-Verse/TraDo-4B-Instruct",
                  f"TraDo-4B-Instruct, SDAR-4B-Chat after RL (TraceRL): {_TRADO_WHERE}", TRADO, _TRADO_PRESETS),
        ModelSpec("tiny-sdar", "sdar", "tiny-sdar",
                  "offline: random tiny SDAR with a local tokenizer (SDAR's defaults)", SDAR, _SDAR_PRESETS),
    ),
    lm_eval=(LMEvalAlias("sdar", "sdar-8b", "SDARLM"), LMEvalAlias("trado", "trado-8b", "TraDoLM")),
)
