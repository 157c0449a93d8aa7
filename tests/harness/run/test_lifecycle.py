"""Model by model: one network resident at a time, shared checkpoints load once, results after every job, and the
batch accounting of the speed figures."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest
import torch

import models.adapters.causal as causal
import models.adapters.native as native
from harness.stats.aggregate import MIN_TIMED_SAMPLES, speed_figures
from harness.cli import build_parser, settings_from_args
from harness.run.folder import RunFolder
from harness.run.generation import loop_batches
from harness.run.runner import Runner, plan
from models.base import GenerationRequest
from models.options import record as decoding_record
from models.registry import load_adapter, spec_for
from tasks.registry import make_task

REPO = Path(__file__).resolve().parents[3]


def settings(output: Path, models: str, *extra: str):
    return settings_from_args(build_parser().parse_args([
        "--models", models, "--tasks", "gsm8k", "--data", "fixtures", "--limit", "1", "--gen-length", "8",
        "--no-progress", "--output", str(output), *extra]))


@pytest.mark.slow
def test_previous_network_is_collected_before_the_next_loads(tmp_path, monkeypatch):
    alive: list[tuple[str, weakref.ref]] = []
    loads: list[str] = []

    def watched(loader, label=None):
        def load(source, *args, **kwargs):
            assert [name for name, ref in alive if ref() is not None] == [], "an earlier network is still alive"
            result = loader(source, *args, **kwargs)
            network = result[1] if isinstance(result, tuple) else result
            name = label or f"{args[0]} network"  # a native network by its kind
            alive.append((name, weakref.ref(network)))
            loads.append(name)
            return result
        return load

    monkeypatch.setattr(native, "load_network", watched(native.load_network))
    monkeypatch.setattr(causal, "load_causal_lm", watched(causal.load_causal_lm, "transformers network"))
    # tiny-llada and tiny-llada-fastdllm share a checkpoint: they run next to each other and load it once; tiny-qwen3
    # runs on the native network (a transformers one is never loaded for it)
    runner = Runner(settings(tmp_path / "run", "tiny-llada,tiny-qwen3,tiny-llada-fastdllm", "--gen-length", "32"))
    finished = runner.run()
    assert loads == ["llada network", "qwen3 network"]
    assert [r.model for r in finished.results] == ["tiny-llada", "tiny-llada-fastdllm", "tiny-qwen3"]
    gc.collect()
    assert all(ref() is None for _, ref in alive)  # the last model is released too


def test_results_are_rewritten_after_every_job(tmp_path, monkeypatch):
    seen: list[list[str]] = []
    write_results = RunFolder.write_results

    def watched(folder, payload):
        path = write_results(folder, payload)
        seen.append([r["model"] for r in json.loads(path.read_text())["results"]])
        return path

    monkeypatch.setattr(RunFolder, "write_results", watched)
    Runner(settings(tmp_path / "run", "tiny-qwen3,tiny-llada")).run()
    assert seen == [["tiny-qwen3"], ["tiny-qwen3", "tiny-llada"]]


@pytest.mark.slow
def test_a_run_killed_after_its_first_job_keeps_its_results(tmp_path):
    output = tmp_path / "run"
    command = [sys.executable, "run_eval.py", "--models", "tiny-qwen3,tiny-llada", "--tasks", "gsm8k", "--data",
               "fixtures", "--gen-length", "64", "--no-progress", "--output", str(output)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = output / "results.json"
    deadline = time.time() + 400
    while time.time() < deadline and not results.exists() and process.poll() is None:
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    kept = json.loads(results.read_text())["results"]
    assert [r["model"] for r in kept] == ["tiny-qwen3"] and kept[0]["n_samples"] == 5


def test_batch_size_is_part_of_the_sample_key():
    task = make_task("gsm8k")
    docs = task.docs(task.load("fixtures", None).records)[:2]
    adapter = load_adapter(spec_for("tiny-qwen3"), torch.device("cpu"), torch.float32)
    config = adapter.make_config({}, 8)
    one = [p.key for p in plan(task, docs, adapter, decoding_record(config), 8, 1234, batch_size=1)]
    four = [p.key for p in plan(task, docs, adapter, decoding_record(config), 8, 1234, batch_size=4)]
    assert len(set(one)) == 2 and not set(one) & set(four)


def test_warmup_samples_run_as_their_own_batches():
    requests = [GenerationRequest(prompt=str(i), canvas_tokens=8) for i in range(7)]
    batches = list(loop_batches(requests, size=4, warmup=1))
    assert batches == [([0], True), ([1, 2, 3, 4], False), ([5, 6], False)]
    batches = list(loop_batches(requests, size=2, warmup=3, order=[6, 5, 4, 3, 2, 1, 0]))
    assert batches == [([6, 5], True), ([4], True), ([3, 2], False), ([1, 0], False)]
    assert [b for b, _ in loop_batches(requests, size=4, warmup=0)] == [[0, 1, 2, 3], [4, 5, 6]]


def record(batch_size: int, warmup: bool = False) -> dict:
    return {"warmup": warmup, "latency_s": 0.5, "nfe": 4, "gen_tokens": 8, "gen_tokens_after_stop": 8,
            "canvas_tokens": 8, "batch_size": batch_size}


def test_speed_figures_use_the_samples_batch_size_and_mark_few_timed_samples():
    few = speed_figures([record(1, True)] + [record(4)] * (MIN_TIMED_SAMPLES - 1), batch_size=1, peak_memory=None)
    assert few["batch_size"] == 4 and few["timed_samples"] == MIN_TIMED_SAMPLES - 1
    assert few["low_sample"] is True and few["min_timed_samples"] == MIN_TIMED_SAMPLES
    enough = speed_figures([record(2)] * MIN_TIMED_SAMPLES, batch_size=8, peak_memory=None, peak_memory_device="cpu")
    assert enough["low_sample"] is False and enough["batch_size"] == 2 and "not resettable" in enough[
        "peak_memory_scope"]


def test_batches_are_sorted_by_prompt_length_and_outputs_stored_in_plan_order(tmp_path):
    from harness.run.generation import length_order

    adapter = load_adapter(spec_for("tiny-qwen3"), torch.device("cpu"), torch.float32)
    requests = [GenerationRequest(prompt=text, canvas_tokens=8) for text in ["a", "a b c d e f", "a b c"]]
    assert length_order(adapter, adapter.make_config(), requests) == [1, 2, 0]
    runner = Runner(settings(tmp_path / "run", "tiny-qwen3", "--limit", "3", "--batch-size", "2"))
    runner.run()
    stored = [json.loads(line)["doc_id"] for line in
              (tmp_path / "run/samples/tiny-qwen3/gsm8k.jsonl").read_text().splitlines()]
    task = make_task("gsm8k")
    assert stored == [d.id for d in task.docs(task.load("fixtures", None).records)[:3]]
