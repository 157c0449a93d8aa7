"""Fixtures for the lm-eval tests: lm-eval's own ``gsm8k_cot`` on three local items, and harness runs of it.

The task YAML is written per session because it names two absolute paths of the machine running the tests: the
built-in ``gsm8k-cot.yaml`` it includes (prompt, stop strings, filters and metric all stay lm-eval's) and the
three-item JSONL beside this file. It only swaps the data for the local file and sets zero shots.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

lm_eval = pytest.importorskip("lm_eval")

HERE = Path(__file__).resolve().parent
ITEMS = HERE / "gsm8k_cot_3.jsonl"
TASK = "gsm8k_cot_local"
GEN_LENGTH = 16

TASK_YAML = """\
include: {builtin}
task: {task}
tag: []
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: {items}
num_fewshot: 0
"""


@pytest.fixture(scope="session")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lmeval_tasks")
    builtin = Path(lm_eval.__file__).resolve().parent / "tasks" / "gsm8k" / "gsm8k-cot.yaml"
    (folder / f"{TASK}.yaml").write_text(TASK_YAML.format(builtin=builtin, task=TASK, items=ITEMS))
    return folder


@pytest.fixture(scope="session")
def items() -> list[dict[str, Any]]:
    return [json.loads(line) for line in ITEMS.read_text().splitlines() if line.strip()]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def run_harness(task_dir: Path) -> Callable[..., None]:
    """``run_eval.py --models MODEL --tasks lmeval:gsm8k_cot_local --gen-length 16 --output OUTPUT [EXTRA...]``."""
    from harness.cli import main

    def run(model: str, output: Path, *extra: str) -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DLLM_LMEVAL_INCLUDE", str(task_dir))
            status = main(["--models", model, "--tasks", f"lmeval:{TASK}", "--output", str(output), "--device", "cpu",
                           "--gen-length", str(GEN_LENGTH), "--no-progress", *extra])
        assert status == 0

    return run


@pytest.fixture(scope="session")
def harness_run(tmp_path_factory: pytest.TempPathFactory, run_harness: Callable[..., None]) -> Callable[[str], Path]:
    """The run folder of one harness run per model per session (the tests only read it)."""
    done: dict[str, Path] = {}

    def run(model: str) -> Path:
        if model not in done:
            done[model] = tmp_path_factory.mktemp(f"run_{model}")
            run_harness(model, done[model])
        return done[model]

    return run


@pytest.fixture(scope="session")
def read_samples() -> Callable[[Path, str], list[dict[str, Any]]]:
    """The scored sample records of a harness run, in document order."""
    return lambda output, model: read_jsonl(output / "samples" / model / f"lmeval_{TASK}.jsonl")
