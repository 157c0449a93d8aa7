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
    kind: str  # which adapter: "ar", "refusion", "llada", "dream"
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

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("qwen3", "ar", "Qwen/Qwen3-8B", "Qwen3-8B, autoregressive baseline (greedy, thinking off)",
                  {"enable_thinking": False}),
        ModelSpec("llama3", "ar", "meta-llama/Meta-Llama-3-8B-Instruct",
                  "Llama-3-8B-Instruct, autoregressive baseline (greedy)", {"enable_thinking": None}),
        ModelSpec("tiny-qwen3", "ar", "tiny-qwen3", "offline: random tiny Qwen3 with a local tokenizer",
                  {"enable_thinking": False}),
        ModelSpec("llada", "llada", "GSAI-ML/LLaDA-8B-Instruct",
                  "LLaDA-8B-Instruct, masked diffusion, low-confidence remasking", presets={"paper": LLADA_PAPER}),
        ModelSpec("tiny-llada", "llada", "tiny-llada", "offline: random tiny LLaDA with a local tokenizer",
                  presets={"paper": LLADA_PAPER}),
        ModelSpec("dream", "dream", "Dream-org/Dream-v0-Instruct-7B", "Dream-v0-Instruct-7B, masked diffusion, entropy",
                  presets={"paper": DREAM_PAPER}),
        ModelSpec("tiny-dream", "dream", "tiny-dream", "offline: random tiny Dream with a local tokenizer",
                  presets={"paper": DREAM_PAPER}),
    ]
}


def model_names() -> list[str]:
    return list(MODELS)


def spec_for(name: str) -> ModelSpec:
    """A registry entry, or an ad-hoc autoregressive entry for ``hf:<hub id or local path>``."""
    if name.startswith("hf:"):
        ref = name[3:]
        return ModelSpec(name, "ar", ref, f"autoregressive model {ref}", {"enable_thinking": None})
    return MODELS[name]


def load_adapter(spec: ModelSpec, device: torch.device, dtype: torch.dtype) -> ModelAdapter:
    source = resolve_source(spec.ref)
    if spec.kind == "ar":
        from models.ar import ARAdapter

        return ARAdapter(spec.name, source, device, dtype, spec.defaults)
    if spec.kind in ("llada", "dream"):
        from models.diffusion import DreamAdapter, LLaDAAdapter

        adapter_class = LLaDAAdapter if spec.kind == "llada" else DreamAdapter
        return adapter_class(spec.name, source, device, dtype, spec.defaults)
    raise ValueError(f"no adapter for model kind {spec.kind}")
