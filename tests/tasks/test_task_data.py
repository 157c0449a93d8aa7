"""Loading task data: each task's own field checks fail with one line naming the file, the line and the field; the
hub loader reads MATH's seven configs; the local layout is that of ../shared/data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tasks.records import DataError, load_hub, load_local, load_records
from tasks.registry import make_task, task_names

GOOD: dict[str, dict[str, Any]] = {
    "mmlu_pro": {"question_id": 1, "question": "q", "options": ["a", "b", "c"], "answer": "B", "answer_index": 1,
                 "cot_content": "", "category": "law", "src": "x"},
    "arc_challenge": {"id": "a1", "question": "q", "choices": {"text": ["a", "b", "c", "d"], "label": list("ABCD")},
                      "answerKey": "A"},
    "math": {"problem": "p", "solution": "so $\\boxed{1}$", "level": "Level 1", "type": "Geometry"},
    "math500": {"problem": "p", "solution": "so $\\boxed{1}$", "answer": "1", "subject": "Geometry", "level": 1,
                "unique_id": "test/geometry/1.json"},
    "gpqa": {"Question": "q", "Correct Answer": "a", "Incorrect Answer 1": "b", "Incorrect Answer 2": "c",
             "Incorrect Answer 3": "d"},
    "humaneval": {"task_id": "HumanEval/0", "prompt": "def f():\n", "canonical_solution": "    return 1\n",
                  "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"},
    "mbpp": {"task_id": 11, "text": "t", "code": "c", "test_list": ["assert 1", "assert 2", "assert 3"],
             "test_setup_code": "", "challenge_test_list": []},
}

# (task, field, bad value, words the one-line message must contain)
BAD = [
    ("mmlu_pro", "answer", "K", "field 'answer'"),
    ("mmlu_pro", "answer", "D", "field 'answer'"),  # only three options
    ("mmlu_pro", "answer", "", "field 'answer'"),
    ("mmlu_pro", "options", "a, b", "field 'options'"),
    ("mmlu_pro", "category", "astrology", "field 'category'"),
    ("arc_challenge", "choices", ["a", "b"], "field 'choices'"),
    ("arc_challenge", "answerKey", "E", "field 'answerKey'"),
    ("math", "type", "Calculus", "field 'type'"),
    ("math", "solution", "no box here", "field 'solution'"),
    ("gpqa", "Question", 3, "field 'Question'"),
    ("gpqa", "Incorrect Answer 2", ["x"], "field 'Incorrect Answer 2'"),
    ("humaneval", "entry_point", "not a name", "field 'entry_point'"),
    ("humaneval", "test", "", "field 'test'"),
    ("mbpp", "test_list", ["assert 1"], "field 'test_list'"),
    ("mbpp", "task_id", "11", "field 'task_id'"),
]


def write(data_dir: Path, name: str, records: list[dict[str, Any]]) -> Path:
    path = data_dir / make_task(name).dataset.local_file
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r) + "\n" for r in records)
    if path.suffix == ".gz":
        import gzip

        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(lines)
    else:
        path.write_text(lines, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_good_local_file_loads_from_the_shared_layout(tmp_path, name):
    write(tmp_path, name, [GOOD[name], GOOD[name]])
    data = load_records(make_task(name).dataset, "auto", tmp_path)
    assert data.source == "local" and len(data.records) == 2


@pytest.mark.parametrize("name, field, value, words", BAD)
def test_a_bad_field_fails_with_file_line_and_field(tmp_path, name, field, value, words):
    path = write(tmp_path, name, [GOOD[name], {**GOOD[name], field: value}])
    with pytest.raises(DataError) as error:
        load_local(make_task(name).dataset, tmp_path)
    message = str(error.value)
    assert message.startswith(f"{path}:2: ") and words in message
    assert "\n" not in message


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_missing_field_or_a_malformed_line_names_it(tmp_path, name):
    task = make_task(name)
    field = task.dataset.required_fields[-1]
    record = {k: v for k, v in GOOD[name].items() if k != field}
    path = write(tmp_path, name, [GOOD[name], record])
    with pytest.raises(DataError, match=f"^{path}:2: missing field '{field}'$"):
        load_local(task.dataset, tmp_path)
    if path.suffix != ".gz":
        path.write_text(json.dumps(GOOD[name]) + "\n{not json\n", encoding="utf-8")
        with pytest.raises(DataError, match=f"^{path}:2: not valid JSON"):
            load_local(task.dataset, tmp_path)


def test_the_local_layout_names():
    assert {name: make_task(name).dataset.local_file for name in task_names()} == {
        "mmlu_pro": "mmlu_pro/test.jsonl", "arc_challenge": "arc_challenge/test.jsonl", "gsm8k": "gsm8k/test.jsonl",
        "math": "math/test.jsonl", "gpqa": "gpqa/gpqa_main.jsonl", "humaneval": "humaneval/HumanEval.jsonl.gz",
        "mbpp": "mbpp/mbpp.jsonl", "humaneval_plus": "humaneval_plus/HumanEvalPlus.jsonl.gz",
        "mbpp_plus": "mbpp_plus/MbppPlus.jsonl.gz", "livecodebench": "livecodebench/test.jsonl .. test6.jsonl",
        "livecodebench_v5": "livecodebench/test.jsonl .. test5.jsonl",
        "livecodebench_v6": "livecodebench/test.jsonl .. test6.jsonl", "aime24": "aime24/train.jsonl",
        "aime25": "aime25/test.jsonl", "ifeval": "ifeval/train.jsonl", "gpqa_diamond": "gpqa/gpqa_diamond.jsonl",
        "bbh": "bbh/<subset>.jsonl", "math500": "math500/test.jsonl"}


class FakeHub:
    """Stands in for ``datasets.load_dataset``: records which configs were asked for."""

    def __init__(self, rows_by_config: dict[str | None, list[dict[str, Any]]]):
        self.rows_by_config = rows_by_config
        self.calls: list[tuple[str, str | None, str]] = []

    def __call__(self, hub_id: str, config: str | None = None, split: str | None = None):
        self.calls.append((hub_id, config, split))
        return self.rows_by_config[config]


def test_math_reads_its_seven_hub_configs_in_group_order(monkeypatch):
    import datasets

    task = make_task("math")
    kinds = {"algebra": "Algebra", "counting_and_probability": "Counting & Probability", "geometry": "Geometry",
             "intermediate_algebra": "Intermediate Algebra", "number_theory": "Number Theory",
             "prealgebra": "Prealgebra", "precalculus": "Precalculus"}
    hub = FakeHub({c: [{**GOOD["math"], "type": kind, "problem": c}] for c, kind in kinds.items()})
    monkeypatch.setattr(datasets, "load_dataset", hub)
    data = load_hub(task.dataset)
    assert [c[1] for c in hub.calls] == list(kinds) and {c[2] for c in hub.calls} == {"test"}
    assert [r["problem"] for r in data.records] == list(kinds)
    assert data.location == "EleutherAI/hendrycks_math/" + "+".join(kinds) + "/test"
    assert [d.group for d in task.docs(data.records)] == list(kinds)


def test_hub_rows_get_the_task_checks_too(monkeypatch):
    import datasets

    hub = FakeHub({"gpqa_main": [GOOD["gpqa"], {**GOOD["gpqa"], "Question": None}]})
    monkeypatch.setattr(datasets, "load_dataset", hub)
    with pytest.raises(DataError, match="^Idavidrein/gpqa row 2: field 'Question'"):
        load_hub(make_task("gpqa").dataset)


def test_gpqa_hub_failure_explains_the_token(monkeypatch):
    import datasets

    def refuse(*args, **kwargs):
        raise ConnectionError("Dataset 'Idavidrein/gpqa' is a gated dataset on the Hub.")

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    with pytest.raises(DataError) as error:
        load_records(make_task("gpqa").dataset, "hub", None)
    message = str(error.value)
    assert "gated dataset" in message and "HF_TOKEN" in message and "gpqa/gpqa_main.jsonl" in message
