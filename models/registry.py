"""The model registry: names a user can pass to ``--models``, with their checkpoints, defaults and presets.

Every entry is declared by its family (``models/families/<family>.py``); a new checkpoint of a known family is one
``ModelSpec`` there, a new family one module there (docs/design.md, "Adding things").
"""

from __future__ import annotations

import importlib

import torch

from models.base import ModelAdapter
from models.families import ADAPTERS, MODELS
from models.family import ModelSpec
from models.sources import resolve_source

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


def preset_names(names: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """Presets any of ``names`` (default: every registry entry) defines."""
    specs = [spec_for(n) for n in names] if names is not None else list(MODELS.values())
    return sorted({preset for spec in specs for preset in spec.presets})


def adapter_class(kind: str) -> type[ModelAdapter]:
    """The adapter class of a kind, imported on demand, so listing the registry stays cheap."""
    module, _, name = ADAPTERS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def describe_options(kind: str) -> list[str]:
    """``name=default (type)`` of every option of one kind's adapter, for ``--list``."""
    from models.options import describe

    return describe(adapter_class(kind).base_config())


def load_adapter(spec: ModelSpec, device: torch.device, dtype: torch.dtype) -> ModelAdapter:
    """The adapter for a registry entry; its weights load on first decode."""
    return adapter_class(spec.kind)(spec.name, resolve_source(spec.ref), device, dtype, spec.defaults)
