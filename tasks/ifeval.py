"""IFEval (``ifeval``): Google's verifiable instructions, scored by lm-eval's port of Google's instruction checkers.

Each prompt carries one or more instructions ("answer in fewer than 300 words", "end with this phrase"). The
scorer is lm-eval's ``ifeval`` ``process_results`` as is, so the strict and loose verdicts are lm-eval's: loose
also accepts the response with its first line, last line or both removed, or with ``*`` deleted.

Two of the 25 instruction kinds tokenize with nltk's ``punkt_tab`` data (``length_constraints:number_sentences``
and ``change_case:capital_word_frequency``). lm-eval downloads it when its checkers are imported; here the import
downloads nothing, and scoring a prompt with either instruction without the data fails with one line naming the
command that installs it (the generations stay in the store; ``--rescore`` scores them afterwards).

Per sample: the prompt-level verdicts (1 when every instruction is followed) and, as ``inst_level_*``, the share
of the prompt's instructions followed, weighted by the prompt's instruction count (the diagnostics' ``weights``), so
the aggregate pools the instructions of all prompts as lm-eval's instruction-level figure does (docs/tasks.md).
"""

from __future__ import annotations

import os
from functools import lru_cache
from types import ModuleType
from typing import Any, Sequence
from unittest import mock

from tasks.base import Doc, SampleScore, Task, TaskPrompt
from tasks.records import DatasetSpec, DataError

PROMPT_STRICT = "prompt_level_strict_acc,none"
INST_STRICT = "inst_level_strict_acc,none"
PROMPT_LOOSE = "prompt_level_loose_acc,none"
INST_LOOSE = "inst_level_loose_acc,none"
NLTK_INSTRUCTIONS = ("length_constraints:number_sentences", "change_case:capital_word_frequency")
NLTK_RESOURCE = "tokenizers/punkt_tab/english/"


@lru_cache(maxsize=1)
def lm_eval_ifeval() -> ModuleType:
    """lm-eval's ``ifeval`` utilities. Its import downloads punkt_tab on rank 0 only, so it is imported as another
    rank: scoring never reaches the network. langdetect (the language and English-case checks) samples at random
    unless seeded; seeded, a response gets the same verdict in every run."""
    import langdetect

    langdetect.DetectorFactory.seed = 0
    with mock.patch.dict(os.environ, {"LOCAL_RANK": "1"}):
        from lm_eval.tasks.ifeval import utils
    return utils


def check_record(record: dict[str, Any]) -> str | None:
    ids, kwargs = record["instruction_id_list"], record["kwargs"]
    if not isinstance(record["prompt"], str) or not record["prompt"].strip():
        return "field 'prompt': expected a non-empty string"
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        return "field 'instruction_id_list': expected a non-empty list of instruction ids"
    if not isinstance(kwargs, list) or len(kwargs) != len(ids) or not all(isinstance(k, dict) for k in kwargs):
        return "field 'kwargs': expected one object per instruction"
    known = lm_eval_ifeval().instructions_registry.INSTRUCTION_DICT
    unknown = [i for i in ids if i not in known]
    if unknown:
        return f"field 'instruction_id_list': unknown instruction {unknown[0]!r}"
    return None


def require_nltk_data(docs: Sequence[Doc]) -> None:
    """Fail in one line, before any check runs, if a prompt needs nltk's punkt_tab and it is not installed."""
    needing = sorted({i for doc in docs for i in doc.data["instruction_id_list"] if i in NLTK_INSTRUCTIONS})
    if not needing:
        return
    import nltk

    try:
        nltk.data.find(NLTK_RESOURCE)
    except LookupError:
        raise DataError(f"ifeval: {', '.join(needing)} needs nltk's punkt_tab data, which is not installed; run "
                        "`python -m nltk.downloader punkt_tab` (or set NLTK_DATA to a folder holding it), then "
                        "--rescore") from None


def verdict_list(followed: Sequence[bool]) -> str:
    """Per-instruction verdicts for the sample browser, in the prompt's instruction order."""
    return " ".join("followed" if f else "not" for f in followed)


def sample_score(record: dict[str, Any], output: str) -> SampleScore:
    verdicts = lm_eval_ifeval().process_results(record, [output])
    strict, loose = verdicts["inst_level_strict_acc"], verdicts["inst_level_loose_acc"]
    return SampleScore(
        target=", ".join(record["instruction_id_list"]),
        extracted={"strict": verdict_list(strict), "loose": verdict_list(loose)},
        scores={PROMPT_STRICT: float(verdicts["prompt_level_strict_acc"]), INST_STRICT: sum(strict) / len(strict),
                PROMPT_LOOSE: float(verdicts["prompt_level_loose_acc"]), INST_LOOSE: sum(loose) / len(loose)},
        # harness.stats.aggregate pools a metric a sample's diagnostics weight: sum(followed) / sum(instructions)
        diagnostics={"empty": not output.strip(), "weights": {INST_STRICT: len(strict), INST_LOOSE: len(loose)}},
    )


class IFEval(Task):
    name = "ifeval"
    version = "ifeval-lm_eval-0.4.13-2"  # 2: instruction level pooled (weights)
    dataset = DatasetSpec(
        hub_id="google/IFEval", config=None, split="train", local_file="ifeval/train.jsonl", fixture="ifeval.jsonl",
        required_fields=("key", "prompt", "instruction_id_list", "kwargs"), check=check_record,
    )
    primary_metric = PROMPT_STRICT
    metrics = (PROMPT_STRICT, INST_STRICT, PROMPT_LOOSE, INST_LOOSE)
    canvas_tokens = 1280  # lm-eval's max_gen_toks for ifeval
    equivalent_lm_eval_task = "ifeval"

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        return [Doc(id=str(r["key"]), data=r) for r in records]

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(user=doc.data["prompt"])

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        require_nltk_data(docs)
        return [sample_score(doc.data, output) for doc, output in zip(docs, outputs)]
