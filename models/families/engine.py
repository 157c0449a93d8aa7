"""The engine baseline: Qwen3 served by vLLM (models/adapters/engine/), and any model behind an OpenAI-compatible
server (``openai:<url>``, no registry entry). lm-eval has its own ``vllm`` and API models, so this family declares no
lm-eval alias."""

from __future__ import annotations

from models.families.ar import QWEN3_TOKENIZER, qwen3_model
from models.family import Family, ModelSpec, TinyModel


def _qwen3_h32(tokenizer, seed: int):
    """tiny-qwen3 with 32-wide heads: vLLM's CPU attention serves head sizes 32, 64, 80, ... only."""
    return qwen3_model(tokenizer, seed, {"head_dim": 32})


FAMILY = Family(
    name="vllm",
    adapters={"vllm": "models.adapters.engine.vllm_adapter:VLLMAdapter",
              "openai": "models.adapters.engine.openai_adapter:OpenAIAdapter"},  # openai:<url>, any server
    tiny=(TinyModel("tiny-qwen3-h32", QWEN3_TOKENIZER, _qwen3_h32),),
    models=(
        ModelSpec("qwen3-vllm", "vllm", "Qwen/Qwen3-8B",
                  "Qwen3-8B served by vLLM, the engine baseline (greedy, thinking off; needs server_python or "
                  "DLLM_VLLM_PYTHON)", {"enable_thinking": False}),
        ModelSpec("tiny-qwen3-vllm", "vllm", "tiny-qwen3-h32",
                  "offline: random tiny Qwen3 (head_dim 32, servable by vLLM-CPU) served by vLLM",
                  {"enable_thinking": False}),
        ModelSpec("tiny-qwen3-realtok-vllm", "vllm", "tiny-qwen3-realtok",
                  "offline once fetched: tiny-qwen3-realtok served by vLLM (the server renders the real template)",
                  {"enable_thinking": False}),
    ),
)
