"""The harness's adapters as lm-eval models: ``lm_eval --model refusion --model_args model=tiny-refusion ...``.

lm-eval renders the prompt (through ``apply_chat_template`` below with ``--apply_chat_template``) and scores; the
text comes from the harness run's own generation loop (``harness.run.generation``: seeding, batches, the timed decode,
warm-up and the per-sample fields). Speed figures (``harness.stats.aggregate.speed_figures``) go
into lm-eval's results file under ``config.dllm_harness``, and also into a folder DIR as ``dllm_speed_<time>.json``
plus per-sample ``dllm_speed_samples_<task>_<time>.jsonl``: DIR is ``speed_output=DIR``, else the environment
variable ``DLLM_LMEVAL_SPEED_OUTPUT``, else lm-eval's ``--output_path`` when run from its command line.

Model arguments: ``model`` (a harness registry name or ``hf:<id or path>``; each family's lm-eval alias has a default),
``device`` (auto), ``dtype`` (auto), ``batch_size`` (1), ``warmup`` (1 sample per task left out of the speed
figures), ``seed`` (1234), ``gen_length`` (canvas for every request; else ``max_gen_toks``, else 512),
``speed_output``; any other argument is a decoding option of the adapter (e.g. ``slot_size=16``). lm-eval's
``gen_kwargs`` give only the stop strings (``until``) and the canvas (``max_gen_toks``): decoding follows the
adapter's config. The models generate only; loglikelihood requests fail with one line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

import torch
from lm_eval.api.model import LM
from tqdm import tqdm

from harness.errors import UserError
from harness.run.generation import LoopSettings, generate_batches, resolve_device
from harness.lmeval.speed_log import SpeedLog
from harness.timing.clock import peak_memory_bytes
from models.base import GenerationRequest, Message
from models.families import LM_EVAL_ALIASES
from models.family import LMEvalAlias
from models.sources import parse_dtype
from models.options import record
from models.registry import load_adapter, model_names, spec_for
from tasks.lmeval_bridge import DEFAULT_CANVAS, until_of

SPEED_OUTPUT_ENV = "DLLM_LMEVAL_SPEED_OUTPUT"
LM_EVAL_ONLY_ARGS = ("max_batch_size", "trust_remote_code")  # lm-eval passes these to every model
APPLIED_GEN_KWARGS = ("until", "max_gen_toks")
LM_EVAL_SCRIPTS = ("lm_eval", "lm-eval")  # dllm-lm-eval hands lm-eval's parser the name "lm-eval"

logger = logging.getLogger(__name__)


class HarnessLMError(UserError, ValueError):
    """Bad model arguments; the message is one line for the user."""


@dataclass(frozen=True)
class LMSettings:
    batch_size: int
    warmup: int
    seed: int
    gen_length: int | None
    speed_output: Path | None


@dataclass(frozen=True)
class Pending:
    """One lm-eval request as the adapter sees it."""

    index: int  # position in lm-eval's request list
    doc_id: int | None
    request: GenerationRequest


def positive_int(name: str, value: Any, minimum: int = 1) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise HarnessLMError(f"{name} must be a whole number, got {value!r}") from None
    if number < minimum:
        raise HarnessLMError(f"{name} must be at least {minimum}, got {number}")
    return number


def speed_folder(argv: Sequence[str]) -> str | None:
    """lm-eval's ``--output_path`` (a folder, or a results file whose folder is meant)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--output_path", "-o")
    known, _ = parser.parse_known_args(list(argv))
    if not known.output_path:
        return None
    path = Path(known.output_path)
    return str(path.parent if path.suffix == ".json" else path)


def lm_eval_cli_output_folder(argv: Sequence[str] | None = None) -> str | None:
    """``--output_path`` when this process is lm-eval's command line (``lm_eval``, ``lm-eval``, ``python -m lm_eval``
    or ``dllm-lm-eval``): the model is not told where lm-eval writes, so the speed files find it here."""
    argv = sys.argv if argv is None else argv
    program = Path(argv[0]) if argv else Path()
    run_as_module = program.name == "__main__.py" and program.parent.name == "lm_eval"
    if program.name not in LM_EVAL_SCRIPTS and not run_as_module:
        return None
    return speed_folder(argv[1:])


def ignored_gen_kwargs(gen_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Generation settings lm-eval asked for that the adapter's config decides instead (greedy ones are no-ops)."""
    return {k: v for k, v in gen_kwargs.items() if k not in APPLIED_GEN_KWARGS
            and not (k == "do_sample" and v is False) and not (k == "temperature" and v == 0)}


def lm_eval_device(name: str | None) -> torch.device:
    """The device lm-eval asks for; its default is ``cuda`` (or ``cuda:0``), so on a machine without CUDA a CUDA
    device falls back to the CPU with a note, as lm-eval's own Hugging Face model does."""
    text = str(name) if name else "auto"
    if text.startswith("cuda") and not torch.cuda.is_available():
        logger.warning("CUDA is not available: running on the CPU instead of %s", text)
        return torch.device("cpu")
    return resolve_device(text)


class HarnessLM(LM):
    """An lm-eval ``LM`` over one harness adapter. Subclasses only set the default harness model."""

    default_model: str | None = None

    def __init__(self, model: str | None = None, device: str | None = None, dtype: str = "auto",
                 batch_size: int | str = 1, warmup: int = 1, seed: int = 1234, gen_length: int | None = None,
                 speed_output: str | None = None, **options: Any):
        super().__init__()
        name = model or self.default_model
        if not name:
            raise HarnessLMError(f"give the harness model: --model_args model=<{'|'.join(model_names())}|hf:...>")
        try:
            self.spec = spec_for(str(name))
        except KeyError:
            raise HarnessLMError(f"unknown harness model {name!r}; valid: {', '.join(model_names())}, "
                                 f"or hf:<hub id or local path>") from None
        output = speed_output or os.environ.get(SPEED_OUTPUT_ENV) or lm_eval_cli_output_folder()
        self.settings = LMSettings(
            batch_size=positive_int("batch_size", batch_size), warmup=positive_int("warmup", warmup, 0),
            seed=int(seed), gen_length=None if gen_length is None else positive_int("gen_length", gen_length),
            speed_output=Path(output) if output else None,
        )
        self._device = lm_eval_device(device)
        overrides = {k: v for k, v in options.items() if k not in LM_EVAL_ONLY_ARGS}
        self.adapter = load_adapter(self.spec, self._device, parse_dtype(dtype, self._device), overrides)
        self.config = self.adapter.make_config(overrides, seed=self.settings.seed)
        self.speed = SpeedLog(self.settings.batch_size)
        self.stamp = datetime.now().isoformat().replace(":", "-")
        self.written: list[Path] = []
        self._warned_gen_kwargs = False

    # ---- what lm-eval asks of a chat model ---------------------------------------------------------------------
    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.adapter.tokenizer, "name_or_path", self.spec.name)).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.adapter.tokenizer, "chat_template", None) or ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The adapter's own rendering (its template, its ``enable_thinking``); a final assistant turn, which lm-eval
        sends with ``add_generation_prompt=False``, is continued as a prefill, as in a harness run."""
        messages = tuple(Message(m["role"], m["content"]) for m in chat_history)
        return self.adapter.render(GenerationRequest(messages=messages), self.config)

    # ---- requests ------------------------------------------------------------------------------------------------
    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        raise NotImplementedError(f"{self.spec.name} through the harness generates only: loglikelihood and "
                                  f"multiple-choice tasks are not supported (use generate_until tasks)")

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError(f"{self.spec.name} through the harness generates only: perplexity tasks are not "
                                  f"supported (use generate_until tasks)")

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Each task's requests in lm-eval's order, seeded and warmed up per task as a harness job is."""
        by_task: dict[str, list[Pending]] = {}
        for index, instance in enumerate(requests):
            by_task.setdefault(instance.task_name or "", []).append(
                Pending(index, instance.doc_id, self.to_request(*instance.args[:2])))
        texts: list[str] = [""] * len(requests)
        bar = tqdm(total=len(requests), desc=self.spec.name, unit="sample", disable=disable_tqdm)
        for task, pending in by_task.items():
            for p, text in zip(pending, self.generate_task(task, pending, bar)):
                texts[p.index] = text
                self.cache_hook.add_partial("generate_until", requests[p.index].args, text)
        bar.close()
        self.write_speed()
        return texts

    def to_request(self, context: str, gen_kwargs: dict[str, Any]) -> GenerationRequest:
        ignored = ignored_gen_kwargs(gen_kwargs)
        if ignored and not self._warned_gen_kwargs:
            logger.warning("gen_kwargs %s not applied: decoding follows the harness config of %s (set its options "
                           "through --model_args)", ignored, self.spec.name)
            self._warned_gen_kwargs = True
        canvas = self.settings.gen_length or positive_int("max_gen_toks", gen_kwargs.get("max_gen_toks")
                                                          or DEFAULT_CANVAS)
        return GenerationRequest(prompt=context, canvas_tokens=canvas, stop=until_of(gen_kwargs))

    def generate_task(self, task: str, pending: Sequence[Pending], bar: tqdm) -> list[str]:
        """The harness's generation loop (as a run's), with the records kept for the speed log."""
        s = self.settings
        loop = LoopSettings(s.batch_size, s.warmup, s.seed, self.rank)
        texts, records = [], []
        for batch in generate_batches(self.adapter, self.config, [p.request for p in pending], loop):
            for i, sample in zip(batch.indices, batch.records):
                texts.append(sample.text)
                records.append({"task": task, "doc_id": pending[i].doc_id, **sample.to_json()})
            bar.update(len(batch.indices))
        self.speed.add(task, records)
        self.speed.set_peak_memory(task, peak_memory_bytes(self._device))
        return texts

    # ---- speed figures -------------------------------------------------------------------------------------------
    def about(self) -> dict[str, Any]:
        s = self.settings
        return {
            "model": self.spec.name,
            "model_ref": self.spec.ref,
            "identity": self.adapter.identity(),
            "decoding": record(self.config),
            "batch_size": s.batch_size,
            "warmup": s.warmup,
            "seed": s.seed,
            "gen_length": s.gen_length,
        }

    def write_speed(self) -> None:
        """Into DIR/<model>/, the folder where lm-eval puts its results when ``model=`` is among the model args."""
        from lm_eval.utils import sanitize_model_name

        if self.settings.speed_output is not None:
            folder = self.settings.speed_output / sanitize_model_name(self.spec.name)
            self.written = self.speed.write(folder, self.stamp, self.about())

    def get_model_info(self) -> dict[str, Any]:
        """lm-eval merges this into its results' ``config`` after the run, so the figures sit in its results file."""
        return {"dllm_harness": {**self.about(), "speed": self.speed.figures(),
                                 "speed_files": [str(p) for p in self.written]}}


class HarnessModelLM(HarnessLM):
    """``dllm-harness``: any harness model, named with ``model=``."""


def alias_class(alias: LMEvalAlias) -> type[HarnessLM]:
    """The plugin class of one declared alias: a HarnessLM whose default model is the alias's, named as
    pyproject.toml's entry point names it."""
    return type(alias.class_name, (HarnessLM,), {
        "__module__": __name__, "__qualname__": alias.class_name, "default_model": alias.model,
        "__doc__": f"``lm_eval --model {alias.name}``: the harness model {alias.model} unless ``model=`` says."})


# Class name -> plugin class, one per alias the families declare (models/families/).
ALIAS_CLASSES: dict[str, type[HarnessLM]] = {a.class_name: alias_class(a) for a in LM_EVAL_ALIASES.values()}


def __getattr__(name: str) -> type[HarnessLM]:
    """``harness.lmeval.model:RefusionLM`` and the other entry points resolve to the built classes."""
    try:
        return ALIAS_CLASSES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
