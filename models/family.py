"""What a model family declares, once: its adapter kinds, network kinds, tiny recipes, registry entries and lm-eval
aliases. Each family is one module in ``models/families/``; the registry, the network loader, the tiny models and the
lm-eval plugin classes are built from those declarations (``models.families``), so nothing is kept in step by hand.

This module only describes; it imports nothing heavy, so a family module stays cheap to import (adapters are named
by ``"module:Class"`` and imported on first use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from models.tokenizer import TokenizerSpec


@dataclass(frozen=True)
class ModelSpec:
    """A name a user can pass to ``--models``: its adapter kind, checkpoint, defaults and presets."""

    name: str
    kind: str  # an adapter kind some family declares
    ref: str  # hub id, local folder, or tiny recipe name
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)  # options for every task (typed in models.options)
    # preset -> task -> overrides: decoder options, and the run's canvas (gen_length) and samples per item (samples)
    presets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def overrides_for(self, task: str, preset: str | None) -> dict[str, Any]:
        """Decoding overrides for one task: the preset's entry for that task, if the preset names it."""
        if preset is None:
            return {}
        return dict(self.presets.get(preset, {}).get(task, {}))


@dataclass(frozen=True)
class NetworkKind:
    """What a native network kind loads: its config class, its network, its name in messages, and the config.json
    ``model_type`` values (lower-cased) that are checkpoints of it. SDAR/TraDo are Qwen3 networks and Fast-dLLM v2 a
    Qwen2 (Dream) one; only their configs say which decoder they were trained for."""

    config: type
    network: type
    label: str
    model_types: frozenset[str]


@dataclass(frozen=True)
class GenerationTokens:
    """The tokens a tiny native checkpoint's generation_config.json names (save_network writes none)."""

    bos: str
    eos: tuple[str, ...]
    pad: str


@dataclass(frozen=True)
class TinyModel:
    """An offline tiny checkpoint (models/tiny.py writes it): a tokenizer, and the network for that tokenizer.

    ``network(tokenizer, seed)`` returns either a native network's config, which is built with seeded weights and
    saved by ``save_network`` (with ``generation`` as its generation_config.json), or a transformers model, saved as
    it is."""

    name: str
    tokenizer: TokenizerSpec | None  # a local tokenizer, or None with write_tokenizer
    network: Callable[[Any, int], Any]
    generation: GenerationTokens | None = None
    seed: int = 0
    # Instead of a local tokenizer: writes released tokenizer files into the folder, (folder, cache root) -> None.
    write_tokenizer: Callable[[Path, Path], None] | None = None


@dataclass(frozen=True)
class LMEvalAlias:
    """``lm_eval --model <name>``: the harness model it runs by default, and the plugin class's name, which
    pyproject.toml's ``lm_eval.models`` entry points name (harness.lmeval.model builds the class)."""

    name: str
    model: str
    class_name: str


@dataclass(frozen=True)
class Family:
    """One model family, declared once."""

    name: str
    adapters: dict[str, str]  # adapter kind -> "module:Class", imported on first use
    models: tuple[ModelSpec, ...]
    networks: dict[str, NetworkKind] = field(default_factory=dict)  # native network kind -> what it loads
    tiny: tuple[TinyModel, ...] = ()
    lm_eval: tuple[LMEvalAlias, ...] = ()


# The paper's seven tasks (tasks.registry.PAPER_TASKS; models never import tasks), for presets that set the same
# options on each.
PAPER_TASK_NAMES = ("mmlu_pro", "arc_challenge", "gsm8k", "math", "gpqa", "humaneval", "mbpp")
# The LiveCodeBench tasks (the whole release and the v5 and v6 windows): a paper's LiveCodeBench setting is its
# setting for each, whichever release or window it scored.
LIVECODEBENCH_TASK_NAMES = ("livecodebench", "livecodebench_v5", "livecodebench_v6")


def every_task(options: dict[str, Any], also: tuple[str, ...] = (),
               **per_task: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A preset with ``options`` on each of the seven tasks and on ``also`` (other tasks the paper reports with the
    same evaluation), and ``per_task`` ones on top for the tasks named."""
    return {task: {**options, **per_task.get(task, {})} for task in (*PAPER_TASK_NAMES, *also)}
