"""The model registry: names a user can pass to ``--models``, with their checkpoints, defaults and presets.

Every entry is declared by its family (``models/families/<family>.py``); a new checkpoint of a known family is one
``ModelSpec`` there, a new family one module there (docs/design.md, "Adding things").
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from models.base import ModelAdapter
from models.families import ADAPTERS, MODELS
from models.family import ModelSpec
from models.networks.lora_folder import AdapterError
from models.options import ADAPTER, split_load_options
from models.sources import SERVED_PREFIX, resolve_source, served_source

SERVED_KIND = "openai"  # a model behind any OpenAI-compatible server (models/adapters/engine/openai_adapter.py)
AD_HOC_PREFIXES = {"hf:": "ar", "vllm:": "vllm", SERVED_PREFIX: SERVED_KIND}


def model_names() -> list[str]:
    return list(MODELS)


def spec_for(name: str) -> ModelSpec:
    """A registry entry, or an ad-hoc autoregressive entry for ``hf:<hub id or local path>`` (transformers),
    ``vllm:<hub id or local path>`` (served by vLLM) or ``openai:<base url>[#<served model>]`` (any server)."""
    for prefix, kind in AD_HOC_PREFIXES.items():
        if name.startswith(prefix):
            ref = name[len(prefix):]
            if kind == SERVED_KIND:  # the server renders its own template: nothing is sent unless set
                return ModelSpec(name, kind, ref, f"model served at {ref}")
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

    cls = adapter_class(kind)
    lora = [f"{ADAPTER}=None (str or none: a PEFT LoRA folder, merged at load)"] if merges_lora(cls) else []
    return describe(cls.base_config()) + lora


def merges_lora(cls: type[ModelAdapter]) -> bool:
    """Whether the kind loads its weights in this process (a native network or transformers), where a LoRA merges."""
    return bool(getattr(cls, "merges_lora", False))


def lora_of(spec: ModelSpec, options: dict[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    """(the LoRA folder ``options`` or else the entry sets, the entry's other defaults); one line for a kind whose
    weights this process does not load."""
    loads, defaults = split_load_options(spec.name, spec.defaults)
    loads.update(split_load_options(spec.name, options or {})[0])
    lora = loads.get(ADAPTER)
    if lora is not None and not merges_lora(adapter_class(spec.kind)):
        raise AdapterError(f"{spec.name}: a LoRA adapter merges only into weights this process loads (a native "
                           f"network or transformers), not the {spec.kind} kind's (merge it into the checkpoint with "
                           f"peft's merge_and_unload and give that folder)")
    return lora, defaults


def load_adapter(spec: ModelSpec, device: torch.device, dtype: torch.dtype,
                 options: dict[str, Any] | None = None) -> ModelAdapter:
    """The adapter for a registry entry; its weights load on first decode (a served model's server is first asked
    then). Of ``options`` (the run's options for this model) only the load options are read here (a LoRA
    ``adapter``, over the entry's own); the others apply per task, in ``make_config``."""
    lora, defaults = lora_of(spec, options)
    source = served_source(spec.ref) if spec.kind == SERVED_KIND else resolve_source(spec.ref, adapter=lora)
    return adapter_class(spec.kind)(spec.name, source, device, dtype, defaults)
