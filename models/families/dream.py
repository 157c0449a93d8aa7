"""Dream (Dream-org/Dream-v0-Instruct-7B, Dream-Coder): masked diffusion with entropy-ordered unmasking, on the native
Dream (Qwen2) network."""

from __future__ import annotations

import dataclasses

from models.family import LIVECODEBENCH_TASK_NAMES, Family, LMEvalAlias, ModelSpec, NetworkKind, TinyModel
from models.networks.dream import DreamNetwork, DreamNetworkConfig, tiny_dream_config
from models.tokenizer import TokenizerSpec, qwen25_chat_template

# Dream-v0-Instruct: Qwen2.5 template with the default system prompt (docs/decoders.md §3).
DREAM_TOKENIZER = TokenizerSpec(
    special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    mask_token="<|mask|>",
    chat_template=qwen25_chat_template("You are a helpful assistant.", close_final_assistant=False),
)

# Dream-v0-Instruct's eval_instruct settings (docs/decoders.md §3): entropy, T 0.1, top_p 0.9, steps = max_new_tokens.
_DREAM_SAMPLING = {"alg": "entropy", "temperature": 0.1, "top_p": 0.9}
DREAM_PAPER = {
    task: {**_DREAM_SAMPLING, "gen_length": length}
    for task, length in {"mmlu_pro": 128, "gsm8k": 256, "math": 512, "humaneval": 768, "mbpp": 1024}.items()
}

# Dream-Coder's README sampling (docs/decoders.md §3.1: temperature 0.1, entropy, top_p 1.0, alg_temp 0,
# steps = max_new_tokens = 512); its eos_penalty 3.0 has no counterpart in Dream's sampler and is not applied.
DREAM_CODER = {"temperature": 0.1, "top_p": 1.0, "alg": "entropy", "alg_temp": 0.0}
# Dream-Coder's code_eval README: LiveCodeBench with 768 new tokens in 768 steps, evalplus with 512 in 512 (steps =
# canvas, the adapter's default); the sampling is DREAM_CODER's.
DREAM_CODER_PAPER = {
    **{task: {"gen_length": 768} for task in LIVECODEBENCH_TASK_NAMES},
    **{task: {"gen_length": 512} for task in ("humaneval", "mbpp", "humaneval_plus", "mbpp_plus")},
}


def _tiny_dream(tokenizer, seed: int) -> DreamNetworkConfig:
    ids = tokenizer.convert_tokens_to_ids
    return dataclasses.replace(tiny_dream_config(len(tokenizer)), eos_token_id=ids("<|endoftext|>"),
                               pad_token_id=ids("<|endoftext|>"), mask_token_id=ids("<|mask|>"))


FAMILY = Family(
    name="dream",
    adapters={"dream": "models.adapters.dream:DreamAdapter"},
    networks={"dream": NetworkKind(DreamNetworkConfig, DreamNetwork, "Dream", frozenset({"dream"}))},
    tiny=(TinyModel("tiny-dream", DREAM_TOKENIZER, _tiny_dream),),
    models=(
        ModelSpec("dream", "dream", "Dream-org/Dream-v0-Instruct-7B", "Dream-v0-Instruct-7B, masked diffusion, entropy",
                  presets={"paper": DREAM_PAPER}),
        ModelSpec("tiny-dream", "dream", "tiny-dream", "offline: random tiny Dream with a local tokenizer",
                  presets={"paper": DREAM_PAPER}),
        ModelSpec("dream-coder", "dream", "Dream-org/Dream-Coder-v0-Instruct-7B",
                  "Dream-Coder-v0-Instruct-7B, masked diffusion for code (README sampling: T 0.1, entropy; --preset "
                  "paper: its evaluation's canvases on LiveCodeBench and evalplus)", DREAM_CODER,
                  {"paper": DREAM_CODER_PAPER}),
    ),
    lm_eval=(LMEvalAlias("dream", "dream", "DreamLM"),),
)
