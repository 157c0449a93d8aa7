"""Fast-dLLM's named evaluation modes (docs/decoders.md §4) as configs, and the decoder rows a speed benchmark runs
side by side. Used by the benchmarks and by the decoder tests (which check the table below).

| mode            | cache  | threshold | steps (LLaDA / Dream)                 |
|-----------------|--------|-----------|---------------------------------------|
| baseline        | none   | None      | gen (LLaDA in blocks; Dream = plain Dream, entropy, no blocks) |
| prefix          | prefix | None      | gen (Dream: entropy)                  |
| dual            | dual   | None      | gen (Dream: entropy); not in the paper table, kept for cost comparisons |
| parallel        | none   | 0.9       | gen / block (Dream: n = block candidates per step) |
| prefix+parallel | prefix | 0.9       | gen / block                           |
| dual+parallel   | dual   | 0.9       | gen / block                           |

Block length is 32 in every mode, the baseline included (Fast-dLLM issue #11).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from models.decoders.contract import ConfigError, DecodeOutput
from models.decoders.fastdllm.core import Network
from models.decoders.fastdllm.dream_sampler import FastDreamConfig, fastdllm_dream_generate
from models.decoders.fastdllm.llada_sampler import FastLLaDAConfig, fastdllm_llada_generate
from models.options import set_options

MODES = ("baseline", "prefix", "dual", "parallel", "prefix+parallel", "dual+parallel")
BENCH_MODES = ("baseline", "prefix", "dual", "parallel", "dual+parallel")
_MODE_CACHE = {"baseline": "none", "prefix": "prefix", "dual": "dual", "parallel": "none",
               "prefix+parallel": "prefix", "dual+parallel": "dual"}

FastConfig = FastLLaDAConfig | FastDreamConfig


def mode_config(kind: str, mode: str, gen_length: int, block_length: int = 32, threshold: float = 0.9,
                **overrides: Any) -> FastConfig:
    """The config of one §4.3 mode for ``kind`` "llada" or "dream"; ``overrides`` set any other leaf (ids, seed)."""
    if kind not in ("llada", "dream"):
        raise ConfigError(f"unknown kind {kind!r}; use 'llada' or 'dream'")
    if mode not in _MODE_CACHE:
        raise ConfigError(f"unknown Fast-dLLM mode {mode!r}; valid: {', '.join(MODES)}")
    parallel = mode.endswith("parallel")
    fields = dict(
        steps=max(gen_length // block_length, 1) if parallel else gen_length,
        block_length=block_length,
        threshold=threshold if parallel else None,
        cache=_MODE_CACHE[mode],
    )
    if kind == "llada":
        return set_options(FastLLaDAConfig(), {"gen_length": gen_length, **fields, **overrides}, kind, True)
    return set_options(FastDreamConfig(), {"max_new_tokens": gen_length, "alg": "entropy", **fields, **overrides},
                       kind, True)


def fastdllm_generate(
    network: Network, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None, cfg: FastConfig
) -> DecodeOutput:
    """Run the Fast-dLLM sampler the config belongs to."""
    if isinstance(cfg, FastLLaDAConfig):
        return fastdllm_llada_generate(network, input_ids, attention_mask, cfg)
    if isinstance(cfg, FastDreamConfig):
        return fastdllm_dream_generate(network, input_ids, attention_mask, cfg)
    raise TypeError(f"not a Fast-dLLM config: {type(cfg).__name__}")


def benchmark_decoders(
    kind: str, network: Network, input_ids: torch.LongTensor, canvas: int = 256, block_length: int = 32,
    modes: tuple[str, ...] = BENCH_MODES, attention_mask: torch.Tensor | None = None, **overrides: Any,
) -> dict[str, Callable[[], DecodeOutput]]:
    """Zero-argument decode callables keyed "<kind> <mode>", for a benchmark that times each and reads ``.nfe``
    and ``.tokens`` from the result. ``overrides`` set config leaves, e.g. the ids of a tiny network (mask_id, ...)."""
    rows = {}
    for mode in modes:
        cfg = mode_config(kind, mode, canvas, block_length, **overrides)
        rows[f"{kind} {mode}"] = lambda c=cfg: fastdllm_generate(network, input_ids, attention_mask, c)
    return rows
