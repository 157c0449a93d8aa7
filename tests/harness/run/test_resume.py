"""A run killed with SIGKILL and rerun ends with exactly the samples of an uninterrupted run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from processes import kill_when

REPO = Path(__file__).resolve().parents[3]
COMMAND = [sys.executable, "run_eval.py", "--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures",
           "--gen-length", "192", "--no-progress"]


def run_to_end(output: Path, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run([*COMMAND, "--output", str(output), *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return done


def store_lines(output: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(output.glob("store/*/*/shard-*.jsonl"))
            for line in path.read_text().splitlines()]


def samples(output: Path) -> dict[str, list[int]]:
    rows = [json.loads(line) for line in (output / "samples/tiny-qwen3/gsm8k.jsonl").read_text().splitlines()]
    return {row["doc_id"]: row["token_ids"] for row in rows}


@pytest.mark.slow
def test_sigkill_then_rerun_equals_uninterrupted(tmp_path):
    reference = tmp_path / "reference"
    run_to_end(reference)

    killed = tmp_path / "killed"
    process = subprocess.Popen([*COMMAND, "--output", str(killed)], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    kill_when(process, lambda: len(store_lines(killed)) >= 2)
    finished_before = {r["key"] for r in store_lines(killed)}
    assert 2 <= len(finished_before) < 5

    run_to_end(killed)
    records = store_lines(killed)
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)) == 5  # nothing regenerated twice, nothing lost
    assert samples(killed) == samples(reference)

    run_to_end(killed)  # a third run of the same command generates nothing
    assert len(store_lines(killed)) == 5
    peak = json.loads((killed / "results.json").read_text())["results"][0]["speed"]["peak_memory_bytes"]
    assert peak > 0

    rescored = run_to_end(killed, "--rescore")
    assert "tiny-qwen3" in rescored.stdout and len(store_lines(killed)) == 5
    results = json.loads((killed / "results.json").read_text())["results"][0]
    assert results["n_samples"] == 5 and results["speed"]["peak_memory_bytes"] == peak
