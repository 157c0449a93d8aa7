"""Fixtures for the report tests: the synthetic run-folder builder (tests/common) and the headless Chromium driver."""

from __future__ import annotations

import importlib.util
import json
import sys
from math import comb
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import run_folders

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def rf() -> ModuleType:
    return run_folders


@pytest.fixture(scope="session")
def chromium_page() -> ModuleType:
    """The driver beside this file (the suite runs in importlib mode, so test folders are not on the import path)."""
    if "chromium_page" not in sys.modules:
        spec = importlib.util.spec_from_file_location("chromium_page", HERE / "chromium_page.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["chromium_page"] = module
        spec.loader.exec_module(module)
    return sys.modules["chromium_page"]


@pytest.fixture
def browser(chromium_page) -> str:
    """The Chromium binary; the test is skipped where none is installed."""
    binary = chromium_page.find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (install with: apt-get install -y chromium)")
    return binary


# Two runs of the same three tiny models whose folders differ only in the settings hash, every accuracy zero and the
# two diffusion models' speeds close together: the report a new user gets from comparing two tiny runs.
CROWDED_SPEEDS = {"tiny-qwen3": (180.0, "ar", 20.0), "tiny-llada": (20.0, "llada", 30.0),
                  "tiny-refusion": (11.0, "refusion", 8.0)}
CROWDED_FOLDER = "tiny-llada+tiny-qwen3+tiny-refusion__gsm8k+mbpp__{}"


@pytest.fixture
def crowded_runs(tmp_path, rf) -> list[Path]:
    runs = []
    for digest, shift in (("1a2b3c4d", 0.0), ("9f8e7d6c", 3.0)):
        entries = [rf.Entry(model, task, rf.samples([0.0] * 4, nfe=nfe), kind=kind, tps_override=tps + shift)
                   for task in ("gsm8k", "mbpp") for model, (tps, kind, nfe) in CROWDED_SPEEDS.items()]
        runs.append(rf.write_run(tmp_path / "runs" / CROWDED_FOLDER.format(digest), entries))
    return runs


# Repeated samples (--samples K): per model, each item's count of correct samples out of its K. "a" draws 4 samples
# per item, "b" 2 (both of AIME 2024, which the ReFusion table's Qwen3 row has a column for); "c" one per item.
REPEATED_CORRECT = {"a": (4, [4, 0, 2, 1, 0]), "b": (2, [2, 2, 0, 1, 1])}


def _estimate(values: list[float]) -> dict:
    """A mean over items with a normal interval from the items' spread: the clustered shape results.json holds."""
    mean = sum(values) / len(values)
    spread = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 / len(values) ** 0.5
    return {"value": mean, "stderr": spread, "ci95": [max(0.0, mean - 1.96 * spread), min(1.0, mean + 1.96 * spread)],
            "n": len(values)}


def repeated_block(k: int, correct: list[int], maj: bool = True) -> dict:
    """The ``repeated`` block of a result whose item i had ``correct[i]`` of its ``k`` samples right, built here by
    the definitions (pass@k: 1 - C(k - c, j) / C(k, j) per item), not by the harness's code."""
    return {
        "samples_per_item": k, "items": len(correct), "metric": "exact_match,flexible-extract",
        "avg": _estimate([c / k for c in correct]),
        "pass_at": {str(j): _estimate([1 - comb(k - c, j) / comb(k, j) for c in correct]) for j in range(1, k + 1)},
        "maj": _estimate([float(2 * c > k) for c in correct]) if maj else None,
        "agreement": {"all_correct": sum(c == k for c in correct) / len(correct),
                      "all_wrong": sum(c == 0 for c in correct) / len(correct),
                      "mixed": sum(0 < c < k for c in correct) / len(correct)},
    }


def repeated_records(rf, k: int, correct: list[int]) -> list[dict]:
    """Each item's k sample records (the first ``correct[i]`` right), keyed and indexed as the runner stores them."""
    scores = [1.0 if j < c else 0.0 for c in correct for j in range(k)]
    docs = [str(i) for i in range(len(correct)) for _ in range(k)]
    records = rf.samples(scores, doc_ids=docs)
    for position, record in enumerate(records):
        record["sample"] = position % k
        record["key"] = f"key-{record['doc_id']}-{record['sample']}"
    return records


def write_repeated_run(rf, folder: Path, task: str = "aime24") -> Path:
    """A run of "a" and "b" with several samples per item of ``task`` and "c" with one, plus a one-sample gsm8k
    result of "a"; each model recorded as Qwen3-8B so the published row (and its k) is set beside it."""
    entries = [rf.Entry(model, task, repeated_records(rf, k, correct), model_ref="Qwen/Qwen3-8B")
               for model, (k, correct) in REPEATED_CORRECT.items()]
    entries += [rf.Entry("c", task, rf.samples([1.0, 0.0, 1.0, 0.0, 0.0]), model_ref="Qwen/Qwen3-8B"),
                rf.Entry("a", "gsm8k", rf.samples([1.0, 0.0, 1.0]), model_ref="Qwen/Qwen3-8B")]
    run = rf.write_run(folder, entries)
    payload = json.loads((run / "results.json").read_text())
    for result in payload["results"]:
        if result["task"] == task and result["model"] in REPEATED_CORRECT:
            k, correct = REPEATED_CORRECT[result["model"]]
            result["repeated"] = repeated_block(k, correct)
            result["manifest"]["samples"] = k
            result["metrics"][result["primary_metric"]] = result["repeated"]["avg"]
    (run / "results.json").write_text(json.dumps(payload))
    return run


@pytest.fixture
def repeated(rf) -> SimpleNamespace:
    """The repeated-samples case: each model's (K, correct counts), the block builder and the run writer."""
    return SimpleNamespace(correct=REPEATED_CORRECT, block=repeated_block,
                           write=lambda folder, task="aime24": write_repeated_run(rf, folder, task))


@pytest.fixture
def repeated_run(tmp_path, repeated) -> Path:
    return repeated.write(tmp_path / "repeated-run")
