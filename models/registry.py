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


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("qwen3", "ar", "Qwen/Qwen3-8B", "Qwen3-8B, autoregressive baseline (greedy, thinking off)",
                  {"enable_thinking": False}),
        ModelSpec("llama3", "ar", "meta-llama/Meta-Llama-3-8B-Instruct",
                  "Llama-3-8B-Instruct, autoregressive baseline (greedy)", {"enable_thinking": None}),
        ModelSpec("tiny-qwen3", "ar", "tiny-qwen3", "offline: random tiny Qwen3 with a local tokenizer",
                  {"enable_thinking": False}),
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
    raise ValueError(f"no adapter for model kind {spec.kind}")
