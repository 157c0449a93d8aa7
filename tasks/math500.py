"""MATH-500 (``math500``): the 500 MATH test problems of PRM800K's test split (Lightman et al., "Let's Verify Step by
Step"), drawn at random from the 5,000, which the 2026 reasoning papers (SDAR, TraDo) report as "MATH500".

Prompted, stopped and scored exactly as ``math`` (tasks/hendrycks_math.py): the Minerva zero-shot prompt, math-verify
on the whole output against the whole gold solution (the primary metric) and the fork's Minerva exact match beside
it, so a model's ``math500`` figure is its ``math`` scoring on this subset. lm-eval 0.4.13's ``minerva_math500``
computes math-verify identically (its exact match is 0.4.13's, as for ``math``). The hub copy has one split of one
file; its ``answer`` field (the boxed answer as text) is kept in the record but not scored against, as ``math`` has
no such field.
"""

from __future__ import annotations

from typing import Any, Sequence

from tasks.base import Doc
from tasks.hendrycks_math import SUBJECTS, HendrycksMath, record_check
from tasks.records import DatasetSpec

FIELDS = ("problem", "solution", "answer", "subject", "level", "unique_id")
check_subject_and_solution = record_check("subject")


def check_record(record: dict[str, Any]) -> str | None:
    """``math``'s checks on the ``subject`` field, and a ``unique_id`` to name the document by."""
    if not isinstance(record["unique_id"], str) or not record["unique_id"].strip():
        return f"field 'unique_id': expected a non-empty string, got {record['unique_id']!r}"
    return check_subject_and_solution(record)


class Math500(HendrycksMath):
    name = "math500"
    version = "math500-minerva_math-refusion-0shot-1"
    dataset = DatasetSpec(
        hub_id="HuggingFaceH4/MATH-500", config=None, split="test", local_file="math500/test.jsonl",
        fixture="math500.jsonl", required_fields=FIELDS, check=check_record,
    )
    equivalent_lm_eval_task = "minerva_math500"
    paper_column = ""  # not the ReFusion table's MATH (the whole test): its figures sit under "math500"

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        """Dataset order (one file, so every source agrees), each problem under its PRM800K id and grouped by
        subject under ``math``'s group names."""
        return [Doc(id=str(r["unique_id"]), data=r, group=SUBJECTS[r["subject"]]) for r in records]
