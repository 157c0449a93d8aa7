"""Fast-dLLM (v1) on LLaDA and Dream: dual cache and confidence-threshold parallel decoding over the plain models'
networks and tiny checkpoints. Its published setting (docs/decoders.md §4) is the Fast-dLLM configs' own default:
block 32, threshold 0.9."""

from __future__ import annotations

from models.family import Family, LMEvalAlias, ModelSpec

FAMILY = Family(
    name="fastdllm",
    adapters={"llada-fastdllm": "models.adapters.llada:FastLLaDAAdapter",
              "dream-fastdllm": "models.adapters.dream:FastDreamAdapter"},
    models=(
        ModelSpec("llada-fastdllm", "llada-fastdllm", "GSAI-ML/LLaDA-8B-Instruct",
                  "LLaDA-8B-Instruct with Fast-dLLM: dual cache, block 32, threshold 0.9"),
        ModelSpec("tiny-llada-fastdllm", "llada-fastdllm", "tiny-llada", "offline: tiny LLaDA with Fast-dLLM"),
        ModelSpec("dream-fastdllm", "dream-fastdllm", "Dream-org/Dream-v0-Instruct-7B",
                  "Dream-v0-Instruct-7B with Fast-dLLM: dual cache, block 32, threshold 0.9"),
        ModelSpec("tiny-dream-fastdllm", "dream-fastdllm", "tiny-dream", "offline: tiny Dream with Fast-dLLM"),
    ),
    lm_eval=(LMEvalAlias("llada-fastdllm", "llada-fastdllm", "LLaDAFastDLLMLM"),
             LMEvalAlias("dream-fastdllm", "dream-fastdllm", "DreamFastDLLMLM")),
)
