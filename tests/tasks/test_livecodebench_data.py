"""LiveCodeBench data: release versions to files, contest-date windows, loading from a --data-dir in the hub's layout,
the private tests decoded as the release ships them, the string-only unpickler, the prompt against lcb_runner's
wording, the code extraction, and the task registry with the ``dllm-2026`` group."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from harness.cli import split_names
from harness.errors import UsageError
from tasks.base import Doc
from tasks.livecodebench.dataset import (Selection, decode_private, encode_private, load, problem, release_files,
                                      unpickle_string)
from tasks.livecodebench.prompt import extract_code
from tasks.livecodebench.task import WINDOW_V5, WINDOW_V6, LiveCodeBench
from tasks.records import FIXTURES, DataError
from tasks.registry import GROUPS, PAPER_TASKS, make_task, task_names

# --- releases and windows (the dataset's loading script; lcb_runner's load_code_generation_dataset) ---


def test_release_versions_read_their_files() -> None:
    assert release_files("release_v1") == ("test.jsonl",)
    assert release_files("release_v5") == ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl")
    assert release_files("release_v6") == release_files("release_latest") == (*release_files("release_v5"),
                                                                                "test6.jsonl")
    assert release_files("v1") == ("test.jsonl",) and release_files("v6") == ("test6.jsonl",)
    assert release_files("v4_v6") == ("test4.jsonl", "test5.jsonl", "test6.jsonl")
    for bad in ("release_v7", "v0", "v5_v4", "v2_v9", "latest", "release_vx"):
        with pytest.raises(DataError):
            release_files(bad)


def test_window_includes_both_ends_at_midnight() -> None:
    window = Selection("release_v6", "2025-02-01", "2025-05-01")
    assert window.admits("2025-02-01T00:00:00") and window.admits("2025-05-01T00:00:00")
    assert not window.admits("2025-01-31T23:59:59") and not window.admits("2025-05-01T00:00:01")
    assert Selection("release_v6").admits("2023-05-01T00:00:00")
    assert Selection("release_v6", start="2024-01-01").admits("2030-01-01T12:00:00")
    assert (WINDOW_V5.version, WINDOW_V5.start, WINDOW_V5.end) == ("release_v5", "2024-08-01", "2025-02-01")
    assert (WINDOW_V6.version, WINDOW_V6.start, WINDOW_V6.end) == ("release_v6", "2025-02-01", "2025-05-01")
    with pytest.raises(ValueError):
        Selection("release_v6", "2025-13-01")


def fixture_record(**changes: object) -> dict:
    record = json.loads((FIXTURES / "livecodebench_test5.jsonl").read_text().splitlines()[0])
    return {**record, **changes}


def write_release(folder: Path, dates: dict[str, list[str]]) -> Path:
    """A --data-dir holding livecodebench/<file> for each file, one record per date (ids name file and date)."""
    (folder / "livecodebench").mkdir(parents=True)
    for name, days in dates.items():
        lines = [json.dumps(fixture_record(question_id=f"{name}:{day}", contest_date=f"{day}T00:00:00"))
                 for day in days]
        (folder / "livecodebench" / name).write_text("".join(line + "\n" for line in lines))
    return folder


def test_versions_and_windows_filter_a_local_release(tmp_path: Path) -> None:
    files = {"test.jsonl": ["2023-05-10"], "test2.jsonl": ["2024-01-10"], "test3.jsonl": ["2024-06-10"],
             "test4.jsonl": ["2024-08-01", "2024-09-30"], "test5.jsonl": ["2024-12-01", "2025-02-01"],
             "test6.jsonl": ["2025-02-01", "2025-03-15", "2025-05-01", "2025-05-02"]}
    data_dir = write_release(tmp_path, files)

    def ids(selection: Selection) -> list[str]:
        return [r["question_id"] for r in load(selection, "auto", data_dir).records]

    assert len(ids(Selection("release_v6"))) == 11
    assert ids(Selection("release_v2")) == ["test.jsonl:2023-05-10", "test2.jsonl:2024-01-10"]
    assert ids(Selection("v6")) == [f"test6.jsonl:{d}" for d in files["test6.jsonl"]]
    assert ids(WINDOW_V5) == ["test4.jsonl:2024-08-01", "test4.jsonl:2024-09-30", "test5.jsonl:2024-12-01",
                              "test5.jsonl:2025-02-01"]
    assert ids(WINDOW_V6) == ["test5.jsonl:2025-02-01", "test6.jsonl:2025-02-01", "test6.jsonl:2025-03-15",
                              "test6.jsonl:2025-05-01"]
    loaded = load(WINDOW_V6, "auto", data_dir)
    assert loaded.source == "local" and len(loaded.sha256) == 64
    assert loaded.sha256 != load(Selection("release_v6"), "auto", data_dir).sha256  # the window is in the digest


def test_a_missing_release_file_fails_naming_it(tmp_path: Path) -> None:
    data_dir = write_release(tmp_path, {"test.jsonl": ["2023-05-10"]})
    with pytest.raises(DataError, match="test2.jsonl not found"):
        load(Selection("release_v2"), "auto", data_dir)


@pytest.mark.parametrize("change, message", [
    ({"platform": "topcoder"}, "field 'platform'"),
    ({"difficulty": "trivial"}, "field 'difficulty'"),
    ({"contest_date": "yesterday"}, "field 'contest_date'"),
    ({"public_test_cases": "[{"}, "field 'public_test_cases'"),
    ({"metadata": "[]"}, "field 'metadata'"),
])
def test_bad_records_fail_at_load_naming_the_line(tmp_path: Path, change: dict, message: str) -> None:
    (tmp_path / "livecodebench").mkdir()
    lines = [json.dumps(fixture_record()), json.dumps(fixture_record(**change))]
    (tmp_path / "livecodebench" / "test.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"test.jsonl:2: {message}"):
        load(Selection("v1"), "auto", tmp_path)


def test_fixtures_per_task() -> None:
    """Fixture files stand for release files; each task reads those of its version inside its window."""
    def ids(name: str) -> list[str]:
        task = make_task(name)
        return [doc.id for doc in task.docs(task.load("fixtures", None).records)]

    assert ids("livecodebench") == ["fix001_a", "count-above-threshold", "fix003_b", "adjacent-pair-sums"]
    assert ids("livecodebench_v5") == ["fix001_a", "count-above-threshold"]
    assert ids("livecodebench_v6") == ["fix003_b", "adjacent-pair-sums"]
    groups = {d.id: d.group for d in make_task("livecodebench").docs(make_task("livecodebench").load(
        "fixtures", None).records)}
    assert groups == {"fix001_a": "easy", "count-above-threshold": "medium", "fix003_b": "medium",
                      "adjacent-pair-sums": "hard"}


# --- private tests: base64(zlib(pickle(JSON text))) and nothing else ---


def test_private_tests_decode_as_shipped() -> None:
    tests = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    shipped = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()  # the release's recipe
    assert encode_private(tests) == shipped
    assert decode_private(shipped) == tests
    assert decode_private(json.dumps(tests)) == tests  # plain JSON is read as is, as lcb_runner tries first
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert unpickle_string(pickle.dumps("text", protocol=protocol)) == "text"


class RunsCommand:
    """Pickles as a call of os.system: what a tampered dataset file would hold."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple:
        import os

        return os.system, (self.command,)


def test_a_tampered_pickle_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = pickle.dumps(RunsCommand(f"touch {marker}"))
    with pytest.raises(DataError, match="refused"):
        unpickle_string(payload)
    blob = base64.b64encode(zlib.compress(payload)).decode()
    with pytest.raises(DataError, match="refused"):
        decode_private(blob)
    with pytest.raises(DataError, match="LiveCodeBench fix001_a: private tests"):
        problem(fixture_record(private_test_cases=blob))
    assert not marker.exists()
    # The opcode check alone is not all: the unpickler itself resolves no global either.
    from tasks.livecodebench.dataset import _NoGlobals
    import io

    with pytest.raises(pickle.UnpicklingError):
        _NoGlobals(io.BytesIO(payload)).load()
    assert not marker.exists()


@pytest.mark.parametrize("value", [["a"], {"a": 1}, 3, b"bytes", None])
def test_only_a_string_is_accepted(value: object) -> None:
    with pytest.raises(DataError):
        unpickle_string(pickle.dumps(value))


def test_undecodable_private_tests_fail_naming_the_problem() -> None:
    for blob in ("!!not base64 or json!!", base64.b64encode(b"not zlib").decode(),
                 base64.b64encode(zlib.compress(pickle.dumps("not json"))).decode()):
        with pytest.raises(DataError, match="LiveCodeBench fix001_a"):
            problem(fixture_record(private_test_cases=blob))


def test_problem_orders_public_then_private_and_reads_the_method() -> None:
    lines = (FIXTURES / "livecodebench_test5.jsonl").read_text().splitlines()
    stdin, functional = (problem(json.loads(line)) for line in lines)
    assert stdin.fn_name is None and functional.fn_name == "countAbove"
    public = json.loads(json.loads(lines[1])["public_test_cases"])
    assert [t.input for t in functional.tests[:len(public)]] == [t["input"] for t in public]
    assert len(functional.tests) == len(public) + 3


# --- prompt and extraction (lcb_runner prompts/code_generation.py, utils/extraction_utils.py) ---

# lcb_runner's generic template, written out as lcb_runner produces it for the two kinds of problem.
STDIN_PROMPT = (
    "### Question:\nQ\n\n### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do "
    "not directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the "
    "python program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n```python\n# YOUR "
    "CODE HERE\n```\n\n### Answer: (use the provided format with backticks)\n\n")
STARTER_PROMPT = (
    "### Question:\nQ\n\n### Format: You will use the following starter code to write the solution to the problem "
    "and enclose your code within delimiters.\n```python\nclass Solution:\n    def f(self):\n        \n```\n\n"
    "### Answer: (use the provided format with backticks)\n\n")
SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
          "generate a correct Python program that matches the specification and passes all tests.")


def test_prompt_is_lcb_runners_generic_chat_prompt() -> None:
    task = LiveCodeBench()
    stdin = task.prompt(Doc("a", {"question_content": "Q", "starter_code": ""}))
    starter = task.prompt(Doc("b", {"question_content": "Q",
                                    "starter_code": "class Solution:\n    def f(self):\n        "}))
    assert (stdin.system, stdin.user, stdin.prefill, stdin.stop) == (SYSTEM, STDIN_PROMPT, None, ("###",))
    assert (starter.system, starter.user) == (SYSTEM, STARTER_PROMPT)


@pytest.mark.parametrize("output, code", [
    ("```python\nprint(1)\n```", "print(1)"),
    ("first\n```python\na = 1\n```\nthen\n```python\nb = 2\n```\n", "b = 2"),   # the last block
    ("```python\nprint(1)\n", ""),                                             # unclosed: no code
    ("no code at all", ""),
    ("text ```python\nx = 1\n``` trailing", "x = 1"),                          # fences found inside lines
    ("```\nplain = True\n```", "plain = True"),
])
def test_code_extraction(output: str, code: str) -> None:
    assert extract_code(output) == code


# --- registry and the dllm-2026 group ---


def test_registry_and_groups() -> None:
    assert {"livecodebench", "livecodebench_v5", "livecodebench_v6"} <= set(task_names())
    assert split_names("all", task_names(), "task") == PAPER_TASKS
    assert "livecodebench" not in PAPER_TASKS and len(PAPER_TASKS) == 7
    assert split_names("dllm-2026", task_names(), "task") == GROUPS["dllm-2026"]
    assert "livecodebench_v6" in GROUPS["dllm-2026"]
    assert all(name in task_names() for name in GROUPS["dllm-2026"])
    assert split_names("livecodebench,gsm8k", task_names(), "task") == ("livecodebench", "gsm8k")
    with pytest.raises(UsageError):
        split_names("dllm-2026,gsm8k", task_names(), "task")  # a group stands alone, as all does
    described = make_task("livecodebench_v6").describe()
    assert described["selection"] == "release_v6 [2025-02-01 .. 2025-05-01]" and described["timeout_per_test_s"] == 6


def test_real_release_when_present(shared_data: Path) -> None:
    """Loads ../shared/data/livecodebench (the hub files) when it is there, and decodes every problem's tests."""
    if not (shared_data / "livecodebench" / "test6.jsonl").exists():
        pytest.skip("../shared/data/livecodebench/test6.jsonl is not present")
    task = make_task("livecodebench_v6")
    docs = task.docs(task.load("auto", shared_data).records)
    assert docs and all(problem(doc.data).tests for doc in docs)


def test_hub_reads_the_release_files_of_the_dataset_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--data hub`` asks huggingface_hub for each release file of the dataset repo (cache only when offline)."""
    import huggingface_hub

    folder = write_release(tmp_path, {f"test{i if i > 1 else ''}.jsonl": [f"2025-0{i}-02"] for i in range(1, 7)})
    calls = []

    def fake_download(repo_id: str, filename: str, repo_type: str, local_files_only: bool) -> str:
        calls.append((repo_id, filename, repo_type, local_files_only))
        return str(folder / "livecodebench" / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = load(WINDOW_V5, "hub", None)
    assert calls == [("livecodebench/code_generation_lite", name, "dataset", True)
                     for name in release_files("release_v5")]
    assert loaded.source == "hub"
    assert loaded.location == "livecodebench/code_generation_lite/release_v5 [2024-08-01 .. 2025-02-01]"
    assert [r["contest_date"] for r in loaded.records] == ["2025-01-02T00:00:00"]  # the others are past the window


def test_hub_failure_says_how_to_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def missing(*args: object, **kwargs: object) -> str:
        raise FileNotFoundError("not cached")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", missing)
    with pytest.raises(DataError, match="livecodebench/code_generation_lite/test.jsonl.*--data fixtures"):
        load(WINDOW_V6, "hub", None)
    assert [r["question_id"] for r in load(WINDOW_V6, "auto", None).records] == ["fix003_b", "adjacent-pair-sums"]
