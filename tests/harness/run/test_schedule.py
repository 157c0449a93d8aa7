"""Rows in flight through the run loop (``--schedule continuous``): each request's tokens are its decode alone's,
each is stored as it finishes with its own times, a killed run keeps every finished request and resumes the rest,
and a decoder without rows in flight says so once and decodes static batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from processes import kill_when

REPO = Path(__file__).resolve().parents[3]
RUN = [sys.executable, "run_eval.py", "--tasks", "gsm8k", "--data", "fixtures", "--no-progress"]


def run(output: Path, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run([*RUN, "--output", str(output), *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    return done


def stored(output: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(output.glob("store/*/*/shard-*.jsonl"))
            for line in path.read_text().splitlines()]


def by_doc(records: list[dict]) -> dict[str, list[int]]:
    return {r["doc_id"]: r["token_ids"] for r in records}


@pytest.mark.parametrize("model", ["tiny-qwen3", *(pytest.param(m, marks=pytest.mark.slow) for m in (
    "tiny-llada", "tiny-refusion", "tiny-dream", "tiny-llada-fastdllm", "tiny-dream-fastdllm", "tiny-sdar", "tiny-fastdllm-v2",
    "tiny-llada2"))])
def test_rows_in_flight_equal_requests_alone_and_time_each_request(tmp_path, model):
    alone = run(tmp_path / "alone", "--models", model, "--gen-length", "32", "--batch-size", "1")
    assert "keeps no rows in flight" not in alone.stdout
    run(tmp_path / "flight", "--models", model, "--gen-length", "32", "--batch-size", "3", "--warmup", "1")
    records = stored(tmp_path / "flight")
    assert by_doc(records) == by_doc(stored(tmp_path / "alone"))
    timed = [r for r in records if not r["warmup"]]
    assert {r["schedule"] for r in timed} == {"continuous"} and len({r["phase"] for r in timed}) == 1
    for r in timed:
        assert r["latency_s"] > 0 and r["queue_s"] >= 0 and r["forward_s"] > 0
        assert r["queue_s"] + r["latency_s"] == pytest.approx(r["phase_elapsed_s"], abs=1e-6)
    assert max(r["queue_s"] for r in timed) > 0  # four requests, three rows: one waited
    speed = json.loads((tmp_path / "flight" / "results.json").read_text())["results"][0]["speed"]
    phase = max(r["phase_elapsed_s"] for r in timed)
    assert speed["tokens_per_second"] == pytest.approx(sum(r["gen_tokens"] for r in timed) / phase)
    assert speed["schedule"] == ["continuous"] and speed["queue_s"]["p90"] >= 0
    if model == "tiny-qwen3":
        assert speed["tokens_per_forward"] == 1.0


@pytest.mark.slow
def test_static_schedule_keeps_whole_batches(tmp_path):
    run(tmp_path / "static", "--models", "tiny-qwen3", "--gen-length", "16", "--batch-size", "2",
        "--schedule", "static", "--warmup", "1")
    timed = [r for r in stored(tmp_path / "static") if not r["warmup"]]
    assert {r.get("schedule") for r in timed} == {"static"}
    assert all(r["latency_s"] == pytest.approx(r["batch_latency_s"] / r["batch_size"]) for r in timed)


def test_a_decoder_without_rows_in_flight_says_so_once(tmp_path):
    out = run(tmp_path / "gemma", "--models", "tiny-diffusiongemma", "--gen-length", "16", "--batch-size", "2",
              "--tasks", "gsm8k,arc_challenge").stdout
    assert out.count("keeps no rows in flight") == 1


@pytest.mark.slow
def test_a_killed_stream_keeps_what_finished_and_resumes_the_rest(tmp_path):
    command = [*RUN, "--models", "tiny-qwen3", "--gen-length", "160", "--batch-size", "2", "--warmup", "0"]
    reference = tmp_path / "reference"
    run(reference, "--models", "tiny-qwen3", "--gen-length", "160", "--batch-size", "2", "--warmup", "0")
    killed = tmp_path / "killed"
    process = subprocess.Popen([*command, "--output", str(killed)], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    kill_when(process, lambda: len(stored(killed)) >= 1)
    assert 1 <= len(stored(killed)) < 5
    run(killed, "--models", "tiny-qwen3", "--gen-length", "160", "--batch-size", "2", "--warmup", "0")
    keys = [r["key"] for r in stored(killed)]
    assert len(keys) == len(set(keys)) == 5
    assert by_doc(stored(killed)) == by_doc(stored(reference))
