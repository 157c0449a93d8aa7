"""Fast-dLLM v2 (Efficient-Large-Model/Fast_dLLM_v2_*): Qwen2.5-Instruct turned block diffusion, the native Qwen2
(Dream) network under a block-causal mask (model_type "fast_dllm_qwen"), decoded by models/decoders/block_diffusion."""

from __future__ import annotations

import dataclasses

from models.family import Family, GenerationTokens, LMEvalAlias, ModelSpec, NetworkKind, TinyModel, every_task
from models.networks.dream import DreamNetwork, FastDLLMv2Config, tiny_fastdllm_v2_config
from models.tokenizer import TokenizerSpec, qwen25_chat_template

# Fast-dLLM v2: Qwen2.5-Instruct's tokenizer and template with |<MASK>| added after its specials (id 151665 in the
# release); eos is <|im_end|>, the tokenizer's pad <|endoftext|> (its special_tokens_map; only config.json says 151645).
FASTDLLM_V2_TOKENIZER = TokenizerSpec(
    special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "|<MASK>|"),
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    mask_token="|<MASK>|",
    chat_template=qwen25_chat_template("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
                                       close_final_assistant=True),
)

# Fast-dLLM v2's README and eval script: blocks of 32 (the checkpoint's bd_size when it is on disk), sub-blocks of 8,
# every mask above 0.9 plus the most confident one, greedy, shifted logits, the next block's first token from the
# commit pass, and no commit forward once every row has finished.
FASTDLLM_V2 = {"enable_thinking": None, "temperature": 0.0, "block_length": 32, "sub_block_length": 8,
               "remasking": "threshold_plus_best", "confidence_threshold": 0.9, "logit_shift": True,
               "first_token_from_commit": True, "commit_finished_block": False}
# v2/eval_script.sh runs gsm8k and minerva_math with threshold 1 (one token per step, the most confident); the
# README's uniform 0.9 is the "readme" preset.
FASTDLLM_V2_README = every_task({"confidence_threshold": 0.9})
FASTDLLM_V2_PAPER = every_task({"confidence_threshold": 0.9}, gsm8k={"confidence_threshold": 1.0},
                               math={"confidence_threshold": 1.0})
_PRESETS = {"paper": FASTDLLM_V2_PAPER, "readme": FASTDLLM_V2_README}
_WHERE = ("blocks of 32 (bd_size) in sub-blocks of 8, threshold 0.9 plus the best (README); --preset paper: threshold "
          "1 on gsm8k and math as in its eval script, --preset readme: 0.9 everywhere")


def _tiny_fastdllm_v2(tokenizer, seed: int) -> FastDLLMv2Config:
    """Fast-dLLM v2 7B as released (Qwen2 names, untied, bd_size 32): config.json's pad = eos = <|im_end|>,
    generation_config.json's pad <|endoftext|> (the tokenizer's too), mask |<MASK>|."""
    ids = tokenizer.convert_tokens_to_ids
    return dataclasses.replace(tiny_fastdllm_v2_config(len(tokenizer)), bos_token_id=ids("<|endoftext|>"),
                               eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|im_end|>"),
                               mask_token_id=ids("|<MASK>|"))


FAMILY = Family(
    name="fastdllm-v2",
    adapters={"fastdllm-v2": "models.adapters.block_diffusion:FastDLLMv2Adapter"},
    networks={"fastdllm-v2": NetworkKind(FastDLLMv2Config, DreamNetwork, "Fast-dLLM v2",
                                         frozenset({"fast_dllm_qwen"}))},
    tiny=(TinyModel("tiny-fastdllm-v2", FASTDLLM_V2_TOKENIZER, _tiny_fastdllm_v2,
                    GenerationTokens("<|endoftext|>", ("<|im_end|>", "<|endoftext|>"), "<|endoftext|>")),),
    models=(
        ModelSpec("fastdllm-v2-7b", "fastdllm-v2", "Efficient-Large-Model/Fast_dLLM_v2_7B",
                  f"Fast-dLLM v2 7B, Qwen2.5-7B-Instruct turned block diffusion; {_WHERE}", FASTDLLM_V2, _PRESETS),
        ModelSpec("fastdllm-v2-1.5b", "fastdllm-v2", "Efficient-Large-Model/Fast_dLLM_v2_1.5B",
                  f"Fast-dLLM v2 1.5B, Qwen2.5-1.5B-Instruct turned block diffusion; {_WHERE}", FASTDLLM_V2,
                  _PRESETS),
        ModelSpec("tiny-fastdllm-v2", "fastdllm-v2", "tiny-fastdllm-v2",
                  "offline: random tiny Fast-dLLM v2 with a local tokenizer (its defaults)", FASTDLLM_V2, _PRESETS),
    ),
    lm_eval=(LMEvalAlias("fastdllm-v2", "fastdllm-v2-7b", "FastDLLMv2LM"),),
)
