"""LLaDA2.0 and LLaDA2.1 (inclusionAI/LLaDA2.*-mini): block diffusion on the native LLaDA2 MoE network (model_type
"llada2_moe"), decoded by models/decoders/block_diffusion with fused commits (and, for 2.1, token editing)."""

from __future__ import annotations

from models.families.sdar import BLOCK_DECODING
from models.family import (LIVECODEBENCH_TASK_NAMES, Family, GenerationTokens, LMEvalAlias, ModelSpec, NetworkKind,
                           TinyModel, every_task)
from models.networks.llada2 import LLaDA2Network, LLaDA2NetworkConfig, tiny_llada2_config
from models.tokenizer import TokenizerSpec

# LLaDA2 (Ling 2.0's tokenizer): <|endoftext|> ends the text (156892 in the release, the published generate's
# eos_id), <|mask|> is the mask (156895), a turn ends at <|role_end|>. The template: role tags around each turn, a
# default system turn "detailed thinking off", the generation prompt <role>ASSISTANT</role>.
LLADA2_CHAT_TEMPLATE = (
    "{%- if not messages or messages[0]['role'] != 'system' -%}"
    "<role>SYSTEM</role>detailed thinking off<|role_end|>{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set role = {'system': 'SYSTEM', 'user': 'HUMAN', 'assistant': 'ASSISTANT'}[message['role']] -%}"
    "<role>{{ role }}</role>{{ message['content'] }}"
    "{%- if not (loop.last and message['role'] == 'assistant') -%}<|role_end|>{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<role>ASSISTANT</role>{%- endif -%}"
)

LLADA2_TOKENIZER = TokenizerSpec(
    special_tokens=("<|startoftext|>", "<|endoftext|>", "<|role_end|>", "<|mask|>"),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    mask_token="<|mask|>",
    bos_token="<|startoftext|>",
    chat_template=LLADA2_CHAT_TEMPLATE,
)

# LLaDA2.0's report (Table 1: temperature 0, block 32, threshold 0.95) and the published generate's defaults (steps
# 32, threshold 0.95, eos_id/mask_id, eos_early_stop as the model card's example passes it); every forward is one
# step of that generate (fused commits). The chat template's own default system turn: "detailed thinking off".
LLADA2 = {"enable_thinking": None, "temperature": 0.0, "block_length": 32, "denoising_steps": 32,
          "remasking": "low_confidence_dynamic", "confidence_threshold": 0.95, "fused_commit": True,
          "eos_early_stop": True}
# The report's one setting holds for all its benchmarks, GPQA-Diamond, BBH, AIME 2025, IFEval and LiveCodeBench among
# them; it states no canvas, so each task keeps its own.
LLADA2_PAPER = every_task({k: LLADA2[k] for k in (*BLOCK_DECODING, "confidence_threshold", "eos_early_stop")},
                          also=("gpqa_diamond", "bbh", "aime25", "ifeval", *LIVECODEBENCH_TASK_NAMES))
_PRESETS = {"paper": LLADA2_PAPER}
# LLaDA2.1 adds token editing; the settings of diffusers' LLaDA2Pipeline example (the report's S and Q settings were
# not found), the rule as SGLang's JointThreshold runs it (docs/decoders.md §7.4).
LLADA21 = {**LLADA2, "confidence_threshold": 0.7, "edit_threshold": 0.5, "max_post_edit_steps": 16,
           "eos_early_stop": False}
_WHERE = "blocks of 32 in up to 32 greedy steps, every mask above 0.95 (LLaDA2.0 report, Table 1)"


def _tiny_llada2(tokenizer, seed: int) -> LLaDA2NetworkConfig:
    """LLaDA2.0-mini's layout (LLaDA2MoeModelLM, model_type llada2_moe) at tiny size; text ends at <|endoftext|>,
    masks are <|mask|>, as the published generate's eos_id / mask_id."""
    return tiny_llada2_config(len(tokenizer) + 1)  # one more row: the published embedding's padding id


FAMILY = Family(
    name="llada2",
    adapters={"llada2": "models.adapters.block_diffusion:LLaDA2Adapter"},
    networks={"llada2": NetworkKind(LLaDA2NetworkConfig, LLaDA2Network, "LLaDA2", frozenset({"llada2_moe"}))},
    tiny=(TinyModel("tiny-llada2", LLADA2_TOKENIZER, _tiny_llada2,
                    GenerationTokens("<|startoftext|>", ("<|endoftext|>",), "<|endoftext|>")),),
    models=(
        ModelSpec("llada2-mini", "llada2", "inclusionAI/LLaDA2.0-mini",
                  f"LLaDA2.0-mini (16B MoE, 1.4B active), block diffusion; {_WHERE}", LLADA2, _PRESETS),
        ModelSpec("llada2.1-mini", "llada2", "inclusionAI/LLaDA2.1-mini",
                  "LLaDA2.1-mini with token editing (SGLang's JointThreshold: masks above 0.7, edits above 0.5, up to "
                  "16 editing steps; diffusers' example settings), blocks of 32", LLADA21),
        ModelSpec("tiny-llada2", "llada2", "tiny-llada2",
                  "offline: random tiny LLaDA2 MoE with a local tokenizer (LLaDA2's defaults)", LLADA2, _PRESETS),
    ),
    lm_eval=(LMEvalAlias("llada2", "llada2-mini", "LLaDA2LM"),),
)
