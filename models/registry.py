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
    "sdar": "models.adapters.block_diffusion:SDARAdapter",
    "fastdllm-v2": "models.adapters.block_diffusion:FastDLLMv2Adapter",
    "llada2": "models.adapters.block_diffusion:LLaDA2Adapter",
    "diffusiongemma": "models.adapters.diffusion_gemma:DiffusionGemmaAdapter",
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

# The paper's seven tasks (tasks.registry.PAPER_TASKS; models never import tasks), for presets that set the same
# options on each.
PAPER_TASK_NAMES = ("mmlu_pro", "arc_challenge", "gsm8k", "math", "gpqa", "humaneval", "mbpp")
# The LiveCodeBench tasks (the whole release and the v5 and v6 windows): a paper's LiveCodeBench setting is its
# setting for each, whichever release or window it scored.
LIVECODEBENCH_TASK_NAMES = ("livecodebench", "livecodebench_v5", "livecodebench_v6")

# Dream-Coder's code_eval README: LiveCodeBench with 768 new tokens in 768 steps, evalplus with 512 in 512 (steps =
# canvas, the adapter's default); the sampling is DREAM_CODER's.
DREAM_CODER_PAPER = {
    **{task: {"gen_length": 768} for task in LIVECODEBENCH_TASK_NAMES},
    **{task: {"gen_length": 512} for task in ("humaneval", "mbpp", "humaneval_plus", "mbpp_plus")},
}


def every_task(options: dict[str, Any], also: tuple[str, ...] = (),
               **per_task: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A preset with ``options`` on each of the seven tasks and on ``also`` (other tasks the paper reports with the
    same evaluation), and ``per_task`` ones on top for the tasks named."""
    return {task: {**options, **per_task.get(task, {})} for task in (*PAPER_TASK_NAMES, *also)}


# SDAR's OpenCompass evaluation (JetAstra/SDAR evaluation/, docs/decoders.md §7): blocks of 4, 4 denoising steps,
# greedy (its top_k 1), static low-confidence remasking; the chat template rendered with its own default (no thinking
# switch), as SDAR's generate.py renders it.
SDAR = {"enable_thinking": None, "temperature": 0.0, "block_length": 4, "denoising_steps": 4,
        "remasking": "low_confidence_static"}
# TraDo's evaluation (Gen-Verse/dLLM-RL configs/trado_eval.yaml): the same blocks, dynamic low-confidence remasking
# above 0.9. By default greedy, like every other entry, so runs compare token for token; that evaluation samples (T 1,
# no top-k or top-p, three answers per item), which --preset paper does with the per-sample seed.
TRADO = {**SDAR, "remasking": "low_confidence_dynamic", "confidence_threshold": 0.9}
# Fast-dLLM v2's README and eval script: blocks of 32 (the checkpoint's bd_size when it is on disk), sub-blocks of 8,
# every mask above 0.9 plus the most confident one, greedy, shifted logits, the next block's first token from the
# commit pass, and no commit forward once every row has finished.
FASTDLLM_V2 = {"enable_thinking": None, "temperature": 0.0, "block_length": 32, "sub_block_length": 8,
               "remasking": "threshold_plus_best", "confidence_threshold": 0.9, "logit_shift": True,
               "first_token_from_commit": True, "commit_finished_block": False}

_SDAR_DECODING = ("block_length", "denoising_steps", "remasking", "temperature")
# The canvases are the evaluations' own: SDAR's eval_sdar_hf.py gen_length 4096, trado_eval.yaml max_token 2000.
# Beyond the seven: SDAR's Table 1 reports IFEval, TraDo's Table 2 AIME 2024 and LiveCodeBench(-v2), each from the
# same evaluation.
SDAR_PAPER = every_task({**{k: SDAR[k] for k in _SDAR_DECODING}, "gen_length": 4096}, also=("ifeval",))
TRADO_PAPER = every_task({**{k: TRADO[k] for k in (*_SDAR_DECODING, "confidence_threshold")}, "temperature": 1.0,
                          "gen_length": 2000}, also=("aime24", *LIVECODEBENCH_TASK_NAMES))
# v2/eval_script.sh runs gsm8k and minerva_math with threshold 1 (one token per step, the most confident); the
# README's uniform 0.9 is the "readme" preset.
FASTDLLM_V2_README = every_task({"confidence_threshold": 0.9})
FASTDLLM_V2_PAPER = every_task({"confidence_threshold": 0.9}, gsm8k={"confidence_threshold": 1.0},
                               math={"confidence_threshold": 1.0})
SDAR_PRESETS = {"paper": SDAR_PAPER}
TRADO_PRESETS = {"paper": TRADO_PAPER}
FASTDLLM_V2_PRESETS = {"paper": FASTDLLM_V2_PAPER, "readme": FASTDLLM_V2_README}
# LLaDA2.0's report (Table 1: temperature 0, block 32, threshold 0.95) and the published generate's defaults (steps
# 32, threshold 0.95, eos_id/mask_id, eos_early_stop as the model card's example passes it); every forward is one
# step of that generate (fused commits). The chat template's own default system turn: "detailed thinking off".
LLADA2 = {"enable_thinking": None, "temperature": 0.0, "block_length": 32, "denoising_steps": 32,
          "remasking": "low_confidence_dynamic", "confidence_threshold": 0.95, "fused_commit": True,
          "eos_early_stop": True}
# The report's one setting holds for all its benchmarks, GPQA-Diamond, BBH, AIME 2025, IFEval and LiveCodeBench among
# them; it states no canvas, so each task keeps its own.
LLADA2_PAPER = every_task({k: LLADA2[k] for k in (*_SDAR_DECODING, "confidence_threshold", "eos_early_stop")},
                          also=("gpqa_diamond", "bbh", "aime25", "ifeval", *LIVECODEBENCH_TASK_NAMES))
LLADA2_PRESETS = {"paper": LLADA2_PAPER}
# LLaDA2.1 adds token editing; the settings of diffusers' LLaDA2Pipeline example (the report's S and Q settings were
# not found), the rule as SGLang's JointThreshold runs it (docs/decoders.md §7.4).
LLADA21 = {**LLADA2, "confidence_threshold": 0.7, "edit_threshold": 0.5, "max_post_edit_steps": 16,
           "eos_early_stop": False}
_LLADA2_WHERE = "blocks of 32 in up to 32 greedy steps, every mask above 0.95 (LLaDA2.0 report, Table 1)"
_SDAR_WHERE = "blocks of 4 in 4 greedy steps, static low-confidence (SDAR's OpenCompass evaluation)"
_TRADO_WHERE = ("blocks of 4 in 4 greedy steps, dynamic low-confidence above 0.9 (TraDo's evaluation, which samples: "
                "--preset paper, T 1)")
_FASTDLLM_V2_WHERE = ("blocks of 32 (bd_size) in sub-blocks of 8, threshold 0.9 plus the best (README); --preset "
                      "paper: threshold 1 on gsm8k and math as in its eval script, --preset readme: 0.9 everywhere")

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
                  "Dream-Coder-v0-Instruct-7B, masked diffusion for code (README sampling: T 0.1, entropy; --preset "
                  "paper: its evaluation's canvases on LiveCodeBench and evalplus)", DREAM_CODER,
                  {"paper": DREAM_CODER_PAPER}),
        ModelSpec("llada-fastdllm", "llada-fastdllm", "GSAI-ML/LLaDA-8B-Instruct",
                  "LLaDA-8B-Instruct with Fast-dLLM: dual cache, block 32, threshold 0.9"),
        ModelSpec("tiny-llada-fastdllm", "llada-fastdllm", "tiny-llada", "offline: tiny LLaDA with Fast-dLLM"),
        ModelSpec("dream-fastdllm", "dream-fastdllm", "Dream-org/Dream-v0-Instruct-7B",
                  "Dream-v0-Instruct-7B with Fast-dLLM: dual cache, block 32, threshold 0.9"),
        ModelSpec("tiny-dream-fastdllm", "dream-fastdllm", "tiny-dream", "offline: tiny Dream with Fast-dLLM"),
        ModelSpec("sdar-8b", "sdar", "JetLM/SDAR-8B-Chat",
                  f"SDAR-8B-Chat, Qwen3-8B turned block diffusion; {_SDAR_WHERE}", SDAR, SDAR_PRESETS),
        ModelSpec("sdar-4b", "sdar", "JetLM/SDAR-4B-Chat",
                  f"SDAR-4B-Chat, Qwen3-4B turned block diffusion; {_SDAR_WHERE}", SDAR, SDAR_PRESETS),
        ModelSpec("sdar-1.7b", "sdar", "JetLM/SDAR-1.7B-Chat",
                  f"SDAR-1.7B-Chat, Qwen3-1.7B turned block diffusion; {_SDAR_WHERE}", SDAR, SDAR_PRESETS),
        ModelSpec("trado-8b", "sdar", "Gen-Verse/TraDo-8B-Instruct",
                  f"TraDo-8B-Instruct, SDAR-8B-Chat after RL (TraceRL): {_TRADO_WHERE}", TRADO, TRADO_PRESETS),
        ModelSpec("trado-4b", "sdar", "Gen-Verse/TraDo-4B-Instruct",
                  f"TraDo-4B-Instruct, SDAR-4B-Chat after RL (TraceRL): {_TRADO_WHERE}", TRADO, TRADO_PRESETS),
        ModelSpec("fastdllm-v2-7b", "fastdllm-v2", "Efficient-Large-Model/Fast_dLLM_v2_7B",
                  f"Fast-dLLM v2 7B, Qwen2.5-7B-Instruct turned block diffusion; {_FASTDLLM_V2_WHERE}", FASTDLLM_V2,
                  FASTDLLM_V2_PRESETS),
        ModelSpec("fastdllm-v2-1.5b", "fastdllm-v2", "Efficient-Large-Model/Fast_dLLM_v2_1.5B",
                  f"Fast-dLLM v2 1.5B, Qwen2.5-1.5B-Instruct turned block diffusion; {_FASTDLLM_V2_WHERE}",
                  FASTDLLM_V2, FASTDLLM_V2_PRESETS),
        ModelSpec("tiny-sdar", "sdar", "tiny-sdar",
                  "offline: random tiny SDAR with a local tokenizer (SDAR's defaults)", SDAR, SDAR_PRESETS),
        ModelSpec("tiny-fastdllm-v2", "fastdllm-v2", "tiny-fastdllm-v2",
                  "offline: random tiny Fast-dLLM v2 with a local tokenizer (its defaults)", FASTDLLM_V2,
                  FASTDLLM_V2_PRESETS),
        ModelSpec("llada2-mini", "llada2", "inclusionAI/LLaDA2.0-mini",
                  f"LLaDA2.0-mini (16B MoE, 1.4B active), block diffusion; {_LLADA2_WHERE}", LLADA2, LLADA2_PRESETS),
        ModelSpec("llada2.1-mini", "llada2", "inclusionAI/LLaDA2.1-mini",
                  "LLaDA2.1-mini with token editing (SGLang's JointThreshold: masks above 0.7, edits above 0.5, up to "
                  "16 editing steps; diffusers' example settings), blocks of 32", LLADA21),
        ModelSpec("tiny-llada2", "llada2", "tiny-llada2",
                  "offline: random tiny LLaDA2 MoE with a local tokenizer (LLaDA2's defaults)", LLADA2, LLADA2_PRESETS),
        # DiffusionGemma's options default to the release's generation_config.json (docs/decoders.md §8); it always
        # samples, each call seeded from its rows' own seeds.
        ModelSpec("diffusiongemma", "diffusiongemma", "google/diffusiongemma-26B-A4B-it",
                  "DiffusionGemma-26B-A4B-it: uniform-state block diffusion on canvases of 256, transformers' own "
                  "generate, sampled (the release's schedule: 48 steps, T 0.8 -> 0.4, entropy bound 0.1)"),
        ModelSpec("tiny-diffusiongemma", "diffusiongemma", "tiny-diffusiongemma",
                  "offline: random tiny DiffusionGemma (canvas 16) with a local Gemma-4-style tokenizer"),
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
