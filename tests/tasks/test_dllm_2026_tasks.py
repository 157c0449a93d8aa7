"""The benchmarks of the 2026 diffusion-LLM papers beside LiveCodeBench: ``aime24``, ``aime25``, ``ifeval``,
``gpqa_diamond`` and ``bbh``. Registry and group, fixtures and prompts, one-line errors for bad records, and gold
checks on the fixtures: a right answer scores 1 and a wrong one 0. ``math500`` (in no group;
tests/tasks/test_math500.py) shares the fixture and bad-record checks. IFEval's verdicts are compared with lm-eval's
own ``process_results`` on crafted responses, strict and loose."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cli import list_registry, split_names
from tasks.base import Doc, Task
from tasks.records import DataError, load_fixtures, load_local
from tasks.registry import GROUPS, PAPER_TASKS, make_task, task_names

NEW = ("aime24", "aime25", "ifeval", "gpqa_diamond", "bbh")


def fixture_docs(name: str) -> tuple[Task, list[Doc]]:
    task = make_task(name)
    return task, task.docs(task.load("fixtures", None).records)


def scores(task: Task, docs: list[Doc], outputs: list[str], metric: str | None = None) -> list[float]:
    return [s.scores[metric or task.primary_metric] for s in task.score(docs, outputs)]


# --- registry, group, listing ---


def test_new_tasks_are_in_the_dllm_2026_group_and_all_stays_the_papers_seven() -> None:
    assert set(NEW) <= set(task_names()) and set(NEW) <= set(GROUPS["dllm-2026"])
    assert split_names("all", task_names(), "task") == PAPER_TASKS and not set(NEW) & set(PAPER_TASKS)
    assert split_names("dllm-2026", task_names(), "task") == GROUPS["dllm-2026"]
    listing = list_registry()
    for name in NEW:
        assert f"  {name} " in listing and make_task(name).dataset.hub_id in listing


@pytest.mark.parametrize("name, hub_id, canvas", [
    ("aime24", "HuggingFaceH4/aime_2024", 4096), ("aime25", "opencompass/AIME2025", 4096),
    ("ifeval", "google/IFEval", 1280), ("gpqa_diamond", "Idavidrein/gpqa", 1024), ("bbh", "SaylorTwift/bbh", 1024),
    ("math500", "HuggingFaceH4/MATH-500", 512),
])
def test_fixtures_load_and_every_doc_has_a_prompt(name: str, hub_id: str, canvas: int) -> None:
    task, docs = fixture_docs(name)
    assert task.describe()["dataset"] == hub_id and task.canvas_tokens == canvas and task.version
    assert len(docs) >= 3 and len({d.id for d in docs}) == len(docs)
    assert task.docs(task.load("fixtures", None).records) == docs
    assert all(task.prompt(doc).user.strip() for doc in docs)


# --- AIME ---


def test_aime_prompt_is_opencompass_boxed_instruction() -> None:
    task, docs = fixture_docs("aime24")
    assert task.prompt(docs[0]).user == (docs[0].data["problem"] + "\nRemember to put your final answer within "
                                         "\\boxed{}.")
    assert [d.id for d in docs] == ["60", "61", "62"]
    assert fixture_docs("aime25")[0].describe()["config"] == "AIME2025-I+AIME2025-II"


@pytest.mark.parametrize("name", ["aime24", "aime25"])
def test_aime_gold_answers_score_1_and_wrong_ones_0(name: str) -> None:
    task, docs = fixture_docs(name)
    answers = [int(d.data["answer"]) for d in docs]
    right = [f"Working it out step by step gives $\\boxed{{{a}}}$." for a in answers]
    assert scores(task, docs, right) == [1.0] * len(docs)
    assert scores(task, docs, [f"So the answer is \\boxed{{{a + 1}}}." for a in answers]) == [0.0] * len(docs)
    nothing = task.score(docs[:1], ["I do not know."])[0]
    assert nothing.scores[task.primary_metric] == 0.0 and nothing.diagnostics["invalid"]


def test_aime_answer_with_leading_zeros_is_the_integer() -> None:
    task, docs = fixture_docs("aime24")
    doc = next(d for d in docs if d.data["answer"] == "030")
    assert scores(task, [doc] * 3, ["\\boxed{30}", "\\boxed{030}", "The answer is $31$"]) == [1.0, 1.0, 0.0]
    assert task.score([doc], ["\\boxed{30}"])[0].target == "30"


# --- GPQA diamond ---


def test_gpqa_diamond_reads_the_diamond_config_with_gpqas_prompt() -> None:
    task, docs = fixture_docs("gpqa_diamond")
    gpqa = make_task("gpqa")
    assert task.dataset.config == "gpqa_diamond" and task.dataset.gated and task.paper_column == ""
    assert task.prompt(docs[0]) == gpqa.prompt(docs[0])
    assert "rRNA " in docs[2].data["choices"]  # the "[...]" note deleted as gpqa (lm-eval 0.4.9.1) does


def test_gpqa_diamond_right_letter_scores_1_and_wrong_letter_0() -> None:
    task, docs = fixture_docs("gpqa_diamond")
    right = [f"Reasoning first. The answer is {d.data['answer']}." for d in docs]
    wrong = [f"The answer is {'(A)' if d.data['answer'] != '(A)' else '(B)'}." for d in docs]
    for metric in task.metrics:
        assert scores(task, docs, right, metric) == [1.0] * len(docs)
        assert scores(task, docs, wrong, metric) == [0.0] * len(docs)


# --- BBH ---


def test_bbh_subsets_prompts_and_groups() -> None:
    from tasks.bbh import pipelines, subsets

    assert len(subsets()) == 27 and subsets() == tuple(sorted(subsets()))
    assert all({p.name for p in pipelines(s)} == {"strict-match", "flexible-extract"} for s in subsets())
    task, docs = fixture_docs("bbh")
    assert {d.group for d in docs} == {"boolean_expressions", "date_understanding", "multistep_arithmetic_two"}
    prompt = task.prompt(docs[0])
    assert prompt.system == "Evaluate the result of a random Boolean expression.\n\n"
    assert prompt.user == f"Q: {docs[0].data['input']}\nA: Let's think step by step."
    assert prompt.stop == ("</s>", "Q:", "<|im_end|>")
    assert docs[0].id == "boolean_expressions-0"


def test_bbh_answer_after_the_answer_is_scores_1_and_a_wrong_one_0() -> None:
    task, docs = fixture_docs("bbh")
    wrong = {"True": "False", "False": "True", "(A)": "(B)", "0": "1", "-8": "8"}
    right_out = [f"Step by step... So the answer is {d.data['target']}." for d in docs]
    wrong_out = [f"Step by step... So the answer is {wrong[d.data['target']]}." for d in docs]
    for metric in task.metrics:
        assert scores(task, docs, right_out, metric) == [1.0] * len(docs)
        assert scores(task, docs, wrong_out, metric) == [0.0] * len(docs)
    # strict needs "the answer is"; flexible falls back to the subset's own pattern (the last True/False here)
    bare = task.score(docs[:1], ["It evaluates to True"])[0]
    assert bare.scores == {"exact_match,strict-match": 0.0, "exact_match,flexible-extract": 1.0}
    assert bare.diagnostics["invalid"]


def test_bbh_local_folder_needs_every_subset(tmp_path: Path) -> None:
    from tasks.bbh import subsets

    folder = tmp_path / "bbh"
    folder.mkdir()
    for subset in subsets()[1:]:
        (folder / f"{subset}.jsonl").write_text(json.dumps({"input": "q", "target": "True"}) + "\n")
    with pytest.raises(DataError, match="boolean_expressions.jsonl not found"):
        make_task("bbh").load("auto", tmp_path)
    (folder / "boolean_expressions.jsonl").write_text(json.dumps({"input": "q", "target": ""}) + "\n")
    with pytest.raises(DataError, match=r"boolean_expressions.jsonl:1: field 'target'"):
        make_task("bbh").load("auto", tmp_path)
    (folder / "boolean_expressions.jsonl").write_text(json.dumps({"input": "q", "target": "False"}) + "\n")
    data = make_task("bbh").load("auto", tmp_path)
    assert data.source == "local" and len(data.records) == 27 and data.location == str(folder)


def test_bbh_hub_loads_each_subset_config_and_tags_its_records(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    from tasks import records

    calls = []

    def fake_load(hub_id: str, config: str, split: str) -> list[dict[str, Any]]:
        calls.append((hub_id, config, split))
        return [{"input": f"{config} q", "target": "x"}]

    monkeypatch.setattr(records, "hub_offline_reason", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    data = make_task("bbh").load("hub", None)
    assert len(calls) == 27 and {c[0] for c in calls} == {"SaylorTwift/bbh"} and {c[2] for c in calls} == {"test"}
    assert all(r["subset"] == r["input"].split()[0] for r in data.records)
    assert data.source == "hub" and data.location == "SaylorTwift/bbh/27 configs/test"


# --- IFEval ---

# (fixture key, response, strict verdicts, loose verdicts), verdicts per instruction as Google's definitions give them
IFEVAL_CASES = [
    (9001, "dear neighbour, would you come over for tea on sunday afternoon? warm wishes, sam", [True], [True]),
    (9001, "Dear neighbour, would you come over for tea on Sunday afternoon?", [False], [False]),
    (9002, '"Rain on the roof,\nthe garden drinks. Is there anything else I can help with?"', [True, True],
     [True, True]),  # end_checker strips quotation marks from the ends before it looks for the phrase
    (9002, '"Rain on the roof. Is there anything else I can help with?" Thanks.', [False, False], [False, False]),
    (9002, '"Rain on the roof, the garden drinks."\nIs there anything else I can help with?', [False, True],
     [True, True]),  # loose drops the last line, which leaves the quoted text
    (9002, "Here is your poem:\n\"Rain on the roof.\"", [False, False], [True, False]),
    (9003, "* banana\n* kiwi\n* apple", [True, True], [True, True]),
    (9003, "* banana\n* apple", [False, False], [False, False]),
    (9003, "Fruits:\n- banana\n- kiwi\n- plum", [True, True], [True, True]),
    (9005, '```json\n{"name": "Tom", "age": 3}\n```', [True, False], [True, False]),
    (9005, '{"name": "Tom"}', [True, True], [True, True]),
    (9005, "Tom is three", [False, True], [False, True]),
]


def ifeval_doc(key: int) -> Doc:
    return next(d for d in fixture_docs("ifeval")[1] if d.data["key"] == key)


@pytest.mark.parametrize("key, response, strict, loose", IFEVAL_CASES)
def test_ifeval_verdicts_match_lm_evals_process_results(key: int, response: str, strict: list[bool],
                                                        loose: list[bool]) -> None:
    from tasks.ifeval import lm_eval_ifeval

    doc = ifeval_doc(key)
    reference = lm_eval_ifeval().process_results(doc.data, [response])
    assert (reference["inst_level_strict_acc"], reference["inst_level_loose_acc"]) == (strict, loose)
    (score,) = make_task("ifeval").score([doc], [response])
    assert score.scores == {
        "prompt_level_strict_acc,none": float(all(strict)), "inst_level_strict_acc,none": sum(strict) / len(strict),
        "prompt_level_loose_acc,none": float(all(loose)), "inst_level_loose_acc,none": sum(loose) / len(loose),
    }
    weights = score.diagnostics["weights"]
    assert weights == {"inst_level_strict_acc,none": len(strict), "inst_level_loose_acc,none": len(loose)}


def test_ifeval_instruction_level_in_the_results_is_lm_evals_pooled_aggregate() -> None:
    """The harness's aggregate of the scored samples (what results.json carries) equals lm-eval's: instruction level
    pools every prompt's instructions (agg_inst_level_acc), prompt level is the mean over prompts."""
    from harness.stats.aggregate import metric_table
    from tasks.ifeval import lm_eval_ifeval

    utils = lm_eval_ifeval()
    docs = [ifeval_doc(key) for key, *_ in IFEVAL_CASES]
    responses = [response for _, response, *_ in IFEVAL_CASES]
    records = [{"scores": s.scores, "diagnostics": s.diagnostics}
               for s in make_task("ifeval").score(docs, responses)]
    table = metric_table(records)
    verdicts = [utils.process_results(d.data, [r]) for d, r in zip(docs, responses)]
    for kind in ("strict", "loose"):
        pooled = utils.agg_inst_level_acc([v[f"inst_level_{kind}_acc"] for v in verdicts])
        mean_of_prompts = sum(sum(v[f"inst_level_{kind}_acc"]) / len(v[f"inst_level_{kind}_acc"])
                              for v in verdicts) / len(verdicts)
        assert table[f"inst_level_{kind}_acc,none"]["value"] == pytest.approx(pooled)
        assert pooled != pytest.approx(mean_of_prompts)  # the cases tell the two apart
        prompt_level = sum(v[f"prompt_level_{kind}_acc"] for v in verdicts) / len(verdicts)
        assert table[f"prompt_level_{kind}_acc,none"]["value"] == pytest.approx(prompt_level)


def test_ifeval_empty_response_follows_nothing() -> None:
    (score,) = make_task("ifeval").score([ifeval_doc(9005)], ["   "])
    assert set(score.scores.values()) == {0.0} and score.diagnostics["empty"]


def punkt_tab_installed() -> bool:
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        return False
    return True


def test_ifeval_sentence_count_without_punkt_tab_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk

    def missing(resource: str) -> None:
        raise LookupError(resource)

    monkeypatch.setattr(nltk.data, "find", missing)
    with pytest.raises(DataError) as error:
        make_task("ifeval").score([ifeval_doc(9004)], ["One. Two. Three. Four."])
    message = str(error.value)
    assert "length_constraints:number_sentences" in message and "nltk.downloader punkt_tab" in message
    assert "\n" not in message
    make_task("ifeval").score([ifeval_doc(9001)], ["fine"])  # prompts without those checks still score


@pytest.mark.skipif(not punkt_tab_installed(), reason="nltk's punkt_tab data is not installed")
def test_ifeval_sentence_count_with_punkt_tab() -> None:
    doc = ifeval_doc(9004)
    (score,) = make_task("ifeval").score([doc], ["One *here*. Two *there*. Three. Four."])
    assert score.scores["prompt_level_strict_acc,none"] == 1.0


def test_ifeval_import_downloads_nothing() -> None:
    code = ("import nltk\n"
            "def refuse(*args, **kwargs): raise SystemExit('nltk.download called')\n"
            "nltk.download = refuse\n"
            "from tasks.ifeval import lm_eval_ifeval\n"
            "assert 'keywords:existence' in lm_eval_ifeval().instructions_registry.INSTRUCTION_DICT\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-500:]
    assert "nltk_data" not in done.stdout + done.stderr


# --- bad records fail in one line naming the file, the line and the field ---

GOOD: dict[str, dict[str, Any]] = {
    "aime24": {"id": 1, "problem": "p", "solution": "s", "answer": "12", "url": "u", "year": "2024"},
    "aime25": {"question": "q", "answer": "7"},
    "ifeval": {"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
    "gpqa_diamond": {"Question": "q", "Correct Answer": "a", "Incorrect Answer 1": "b", "Incorrect Answer 2": "c",
                     "Incorrect Answer 3": "d"},
    "math500": {"problem": "p", "solution": "so $\\boxed{1}$", "answer": "1", "subject": "Geometry", "level": 1,
                "unique_id": "test/geometry/1.json"},
}
BAD = [
    ("aime24", "answer", "1000", "field 'answer'"),
    ("aime24", "answer", "x", "field 'answer'"),
    ("aime25", "question", "", "field 'question'"),
    ("ifeval", "kwargs", [{}, {}], "field 'kwargs'"),
    ("ifeval", "instruction_id_list", ["no:such"], "unknown instruction 'no:such'"),
    ("gpqa_diamond", "Question", 3, "field 'Question'"),
    ("math500", "subject", "Calculus", "field 'subject'"),
    ("math500", "subject", ["Geometry"], "field 'subject'"),
    ("math500", "solution", "no box here", "field 'solution'"),
    ("math500", "unique_id", "", "field 'unique_id'"),
]


@pytest.mark.parametrize("name, field, value, words", BAD)
def test_a_bad_field_fails_with_file_line_and_field(tmp_path: Path, name: str, field: str, value: Any,
                                                    words: str) -> None:
    spec = make_task(name).dataset
    path = tmp_path / spec.local_file
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(GOOD[name]) + "\n" + json.dumps({**GOOD[name], field: value}) + "\n")
    with pytest.raises(DataError) as error:
        load_local(spec, tmp_path)
    assert str(error.value).startswith(f"{path}:2: ") and words in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_the_fixtures_pass_the_same_checks(name: str) -> None:
    assert load_fixtures(make_task(name).dataset).source == "fixtures"
