"""MATH-500 (``math500``): ``math``'s prompt and scoring on the hub's 500-item schema, its documents (ids, subject
groups, order), its place in the registry (in no group), and its math-verify verdicts beside lm-eval 0.4.13's own
``minerva_math500`` scorer."""

from __future__ import annotations

from typing import Any

import pytest

from harness.cli import list_registry, split_names
from tasks.hendrycks_math import SUBJECTS, HendrycksMath
from tasks.math500 import Math500
from tasks.records import DataError, load_fixtures, load_hub
from tasks.registry import GROUPS, PAPER_TASKS, make_task, task_names


def fixture_docs():
    task = Math500()
    return task, task.docs(load_fixtures(task.dataset).records)


def test_math500_is_a_task_in_no_group() -> None:
    assert "math500" in task_names() and isinstance(make_task("math500"), Math500)
    assert all("math500" not in names for names in GROUPS.values()) and "math500" not in PAPER_TASKS
    assert split_names("all", task_names(), "task") == PAPER_TASKS
    assert "  math500 " in list_registry() and "HuggingFaceH4/MATH-500" in list_registry()


def test_math500_describes_itself_apart_from_math() -> None:
    task, math = Math500(), HendrycksMath()
    described = task.describe()
    assert (described["dataset"], described["split"], described["config"]) == ("HuggingFaceH4/MATH-500", "test", None)
    assert described["lm_eval_task"] == "minerva_math500" and described["paper_column"] is None
    assert task.version != math.version  # part of every store key: a math sample is never reused as a math500 one
    assert (task.primary_metric, task.metrics, task.canvas_tokens) == (math.primary_metric, math.metrics,
                                                                        math.canvas_tokens)


def test_math500_docs_keep_the_hub_order_ids_and_subject_groups() -> None:
    task, docs = fixture_docs()
    records = [d.data for d in docs]
    assert [d.id for d in docs] == [r["unique_id"] for r in records]
    assert [d.group for d in docs] == [SUBJECTS[r["subject"]] for r in records]
    assert {d.group for d in docs} == set(SUBJECTS.values())
    assert [d.id for d in task.docs(list(reversed(records)))] == [d.id for d in reversed(docs)]
    assert all(isinstance(r["level"], int) and 1 <= r["level"] <= 5 for r in records)  # the hub's int64


def test_math500_prompt_is_maths() -> None:
    task, docs = fixture_docs()
    for doc in docs:
        prompt = task.prompt(doc)
        assert prompt == HendrycksMath().prompt(doc)
        assert prompt.user == f"Problem:\n{doc.data['problem']}\n\nSolution:" and prompt.stop == ("Problem:",)


def outputs_for(doc: Any) -> list[str]:
    answer = doc.data["answer"]
    return [doc.data["solution"], f"Thus the answer is $\\boxed{{{answer}}}$.", "The answer is $\\boxed{-7}$.",
            "I cannot solve this.", f"Final Answer: The final answer is ${answer}$. I hope it is correct."]


def test_math500_math_verify_is_lm_evals_minerva_math500() -> None:
    """lm-eval's ``process_results`` for ``minerva_math500`` verifies the output against the whole solution, as the
    harness does; its exact match (0.4.13's normalisation) is not the fork's and is not compared here."""
    import datasets
    from lm_eval.tasks.minerva_math.utils import process_docs, process_results

    task, docs = fixture_docs()
    lm_docs = process_docs(datasets.Dataset.from_list([d.data for d in docs]))
    verdicts, theirs = [], []
    for doc, lm_doc in zip(docs, lm_docs):
        outputs = outputs_for(doc)
        verdicts += [s.scores["math_verify,none"] for s in task.score([doc] * len(outputs), outputs)]
        theirs += [float(process_results(lm_doc, [output])["math_verify"]) for output in outputs]
    assert verdicts == theirs
    assert 0.0 in verdicts and 1.0 in verdicts


class FakeHub:
    def __init__(self, rows: list[dict[str, Any]]):
        self.rows, self.calls = rows, []

    def __call__(self, hub_id: str, config: str | None = None, split: str | None = None):
        self.calls.append((hub_id, config, split))
        return self.rows


def test_math500_reads_the_hubs_one_split(monkeypatch) -> None:
    import datasets

    records = load_fixtures(Math500.dataset).records
    hub = FakeHub(records)
    monkeypatch.setattr(datasets, "load_dataset", hub)
    data = load_hub(Math500.dataset)
    assert hub.calls == [("HuggingFaceH4/MATH-500", None, "test")]
    assert data.location == "HuggingFaceH4/MATH-500/default/test" and data.records == records


@pytest.mark.parametrize("field", ["subject", "unique_id"])
def test_a_hub_row_with_a_bad_field_fails_naming_it(monkeypatch, field: str) -> None:
    import datasets

    good = load_fixtures(Math500.dataset).records[0]
    monkeypatch.setattr(datasets, "load_dataset", FakeHub([good, {**good, field: None}]))
    with pytest.raises(DataError, match=f"^HuggingFaceH4/MATH-500 row 2: field '{field}'"):
        load_hub(Math500.dataset)
