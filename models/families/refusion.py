"""ReFusion (GSAI-ML/ReFusion): slot-level plan-and-infill on a Qwen3-8B fine-tune, on the native Qwen3 network."""

from __future__ import annotations

from functools import partial

from models.families.ar import REALTOK_SIZE, real_qwen3_tokenizer, qwen3_model
from models.family import Family, LMEvalAlias, ModelSpec, TinyModel
from models.real_tokenizer import REFUSION_ADDED_TOKENS
from models.tokenizer import QWEN3_CHAT_TEMPLATE, QWEN3_SPECIALS, TokenizerSpec

# ReFusion adds <|beginoftext|> and <|mask|> to the Qwen3 tokenizer (docs/decoders.md §1).
REFUSION_TOKENIZER = TokenizerSpec(
    special_tokens=QWEN3_SPECIALS + ("<|beginoftext|>", "<|mask|>"),
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    mask_token="<|mask|>",
    bos_token="<|beginoftext|>",
    chat_template=QWEN3_CHAT_TEMPLATE,
)

# ReFusion's eval.sh (docs/decoders.md §1): canvas 512, slot size, serial blocks, slot and token thresholds per task.
REFUSION_PAPER = {
    task: {"gen_length": 512, "slot_size": slot, "serial_num_blocks": blocks, "slot_threshold": slot_thr,
           "token_threshold": token_thr}
    for task, (slot, blocks, slot_thr, token_thr) in {
        "mmlu_pro": (16, 4, 0.9, 0.4),
        "arc_challenge": (8, 64, 0.8, 0.1),
        "gsm8k": (32, 4, 0.9, 0.4),
        "math": (32, 8, 0.8, 0.6),
        "gpqa": (8, 32, 0.8, 0.2),
        "humaneval": (32, 4, 0.9, 0.4),
        "mbpp": (32, 4, 0.9, 0.3),
    }.items()
}
_PRESETS = {"paper": REFUSION_PAPER}


def _refusion(tokenizer, seed: int):
    return qwen3_model(tokenizer, seed, {"mask_token_id": tokenizer.convert_tokens_to_ids("<|mask|>")})


def _refusion_realtok(tokenizer, seed: int):
    # ReFusion resized its embeddings to the tokenizer (151671) and set bos/mask to its two added tokens.
    ids = tokenizer.convert_tokens_to_ids
    return qwen3_model(tokenizer, seed, {**REALTOK_SIZE, "bos_token_id": ids("<|beginoftext|>"),
                                         "mask_token_id": ids("<|mask|>")})


FAMILY = Family(
    name="refusion",
    adapters={"refusion": "models.adapters.refusion:RefusionAdapter"},
    tiny=(
        TinyModel("tiny-refusion", REFUSION_TOKENIZER, _refusion),
        TinyModel("tiny-refusion-realtok", None, _refusion_realtok,
                  write_tokenizer=partial(real_qwen3_tokenizer, added=REFUSION_ADDED_TOKENS)),
    ),
    models=(
        ModelSpec("refusion", "refusion", "GSAI-ML/ReFusion",
                  "ReFusion, slot-level plan-and-infill on Qwen3-8B (eval.py defaults; --preset paper per task)",
                  presets=_PRESETS),
        ModelSpec("tiny-refusion", "refusion", "tiny-refusion", "offline: random tiny ReFusion with a local tokenizer",
                  presets=_PRESETS),
        ModelSpec("tiny-refusion-realtok", "refusion", "tiny-refusion-realtok",
                  "offline once fetched: random tiny ReFusion with the released tokenizer (npm)", presets=_PRESETS),
    ),
    lm_eval=(LMEvalAlias("refusion", "refusion", "RefusionLM"),),
)
