"""Every model family, each declared once in its own module (models/family.py says what a declaration holds).

The registry (``models.registry``), the native network kinds (``models.networks.loading``), the tiny models
(``models.tiny``) and lm-eval's aliases (``harness.lmeval.model``) are the tables below, built from ``FAMILIES``.
Their order is the families' order here, which is the order ``--list`` shows.
"""

from __future__ import annotations

from typing import Iterable, TypeVar

from models.families import ar, diffusion_gemma, dream, engine, fastdllm, fastdllm_v2, llada, llada2, refusion, sdar
from models.family import Family, LMEvalAlias, ModelSpec, NetworkKind, TinyModel

FAMILIES: tuple[Family, ...] = tuple(module.FAMILY for module in (
    ar, engine, refusion, llada, dream, fastdllm, sdar, fastdllm_v2, llada2, diffusion_gemma))

T = TypeVar("T")


def _unique(what: str, pairs: Iterable[tuple[str, T]]) -> dict[str, T]:
    """Name -> declaration, refusing a name two declarations share."""
    table: dict[str, T] = {}
    for name, value in pairs:
        if name in table:
            raise ValueError(f"{what} {name!r} is declared twice")
        table[name] = value
    return table


ADAPTERS: dict[str, str] = _unique("adapter kind", (pair for f in FAMILIES for pair in f.adapters.items()))
NETWORK_KINDS: dict[str, NetworkKind] = _unique("network kind", (pair for f in FAMILIES for pair in f.networks.items()))
TINY_MODELS: dict[str, TinyModel] = _unique("tiny model", ((t.name, t) for f in FAMILIES for t in f.tiny))
MODELS: dict[str, ModelSpec] = _unique("model", ((spec.name, spec) for f in FAMILIES for spec in f.models))
LM_EVAL_ALIASES: dict[str, LMEvalAlias] = _unique("lm-eval alias", ((a.name, a) for f in FAMILIES for a in f.lm_eval))
