"""LLaDA (GSAI-ML/LLaDA-8B-Instruct, LLaDA-1.5): masked diffusion with low-confidence remasking, on the native LLaDA
network."""

from __future__ import annotations

import dataclasses

from models.family import Family, LMEvalAlias, ModelSpec, NetworkKind, TinyModel
from models.networks.llada import LLaDANetwork, LLaDANetworkConfig, tiny_llada_config
from models.tokenizer import TokenizerSpec

# LLaDA-8B-Instruct: Llama-3 style headers, the template itself starts with <|startoftext|> (docs/decoders.md §2).
LLADA_CHAT_TEMPLATE = (
    "<|startoftext|>"
    "{% for m in messages %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}"
    "{% if not (m['role'] == 'assistant' and loop.last) %}<|eot_id|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

LLADA_TOKENIZER = TokenizerSpec(
    special_tokens=("<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                    "<|mdm_mask|>"),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    mask_token="<|mdm_mask|>",
    bos_token="<|startoftext|>",
    chat_template=LLADA_CHAT_TEMPLATE,
)

# LLaDA-8B-Instruct's own evaluation (docs/decoders.md §2): gen_length = block_length, one token per step.
LLADA_PAPER = {
    "mmlu_pro": {"gen_length": 256},
    "arc_challenge": {"gen_length": 512},
    "gsm8k": {"gen_length": 512, "confidence_eos_eot_inf": True},
    "math": {"gen_length": 512, "confidence_eos_eot_inf": True},
    "gpqa": {"gen_length": 64, "confidence_eos_eot_inf": True},
    "humaneval": {"gen_length": 512, "logits_eos_inf": True},
    "mbpp": {"gen_length": 256, "confidence_eos_eot_inf": True},
}

# LLaDA-1.5's own evaluation (docs/decoders.md §2.1): (gen, block) per task, one token per step.
LLADA_15_PAPER = {
    task: {"gen_length": gen, "block_length": block, "confidence_eos_eot_inf": eos_inf}
    for task, (gen, block, eos_inf) in {
        "gsm8k": (256, 16, True),
        "math": (1024, 128, True),
        "gpqa": (256, 16, False),
        "humaneval": (512, 32, True),
        "mbpp": (512, 32, True),
    }.items()
}


def _tiny_llada(tokenizer, seed: int) -> LLaDANetworkConfig:
    ids = tokenizer.convert_tokens_to_ids
    return dataclasses.replace(tiny_llada_config(len(tokenizer)), eos_token_id=ids("<|endoftext|>"),
                               pad_token_id=ids("<|endoftext|>"), mask_token_id=ids("<|mdm_mask|>"))


FAMILY = Family(
    name="llada",
    adapters={"llada": "models.adapters.llada:LLaDAAdapter"},
    networks={"llada": NetworkKind(LLaDANetworkConfig, LLaDANetwork, "LLaDA", frozenset({"llada"}))},
    tiny=(TinyModel("tiny-llada", LLADA_TOKENIZER, _tiny_llada),),
    models=(
        ModelSpec("llada", "llada", "GSAI-ML/LLaDA-8B-Instruct",
                  "LLaDA-8B-Instruct, masked diffusion, low-confidence remasking", presets={"paper": LLADA_PAPER}),
        ModelSpec("tiny-llada", "llada", "tiny-llada", "offline: random tiny LLaDA with a local tokenizer",
                  presets={"paper": LLADA_PAPER}),
        ModelSpec("llada-1.5", "llada", "GSAI-ML/LLaDA-1.5",
                  "LLaDA-1.5 (LLaDA-8B-Instruct after VRPO), masked diffusion", presets={"paper": LLADA_15_PAPER}),
    ),
    lm_eval=(LMEvalAlias("llada", "llada", "LLaDALM"),),
)
