"""The engine baseline against the transformers baseline, through the adapter and through the whole harness, and
its failures: a server that answers an error, a server killed mid-run (the rerun resumes)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.files import cache_root, read_jsonl, write_jsonl_atomic
from models.adapters.engine.server import EngineError
from models.real_tokenizer import TokenizerFetchError, fetch_tokenizer
from adapter_cases import chat
from models.base import GenerationRequest
from models.registry import ModelSpec, load_adapter
from models.tiny import materialize

CPU = torch.device("cpu")
REPO = Path(__file__).resolve().parents[4]


# Two of these end in an end-of-sequence id well inside the canvas on the tiny model; the others fill it.
REQUESTS = [chat("Question 10: what is 10 times 13?", 96), chat("Question 29: what is 29 times 32?", 96),
            chat("What is 2 + 2?", canvas=40, system="Answer briefly."),
            chat("Pick one.", canvas=40, prefill="The best answer is"),
            GenerationRequest(prompt="Once upon a time", canvas_tokens=32)]


def live_members(group: int, settle_s: float) -> list[int]:
    """Processes of a process group that are still running after `settle_s`. Zombies do not count: a killed
    worker whose parent is gone waits for PID 1 to reap it, and in a container PID 1 may never do so, so the
    group id can stay in use with nothing left alive in it."""
    deadline = time.monotonic() + settle_s
    while True:
        live = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                state, _parent, process_group = stat.read_text().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue  # the process ended while being read
            if int(process_group) == group and state not in ("Z", "X"):
                live.append(int(stat.parent.name))
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.2)


@pytest.fixture(scope="module")
def realtok_engine(serve, engine_python, tmp_path_factory):
    """tiny-qwen3-realtok served by vLLM: the server renders the released Qwen3 chat template itself."""
    try:
        fetch_tokenizer(cache_root())
    except TokenizerFetchError as error:
        pytest.skip(f"real Qwen3 tokenizer unavailable: {error}")
    with serve("tiny-qwen3-realtok-vllm", engine_python, tmp_path_factory.mktemp("realtok-engine")) as adapter:
        yield adapter


# Each engine model and the checkpoint its transformers twin loads: the tiny tokenizer, and the released one.
TWINS = {"tiny-qwen3-vllm": ("engine", "tiny-qwen3-h32"), "tiny-qwen3-realtok-vllm": ("realtok_engine",
                                                                                    "tiny-qwen3-realtok")}


@pytest.fixture(scope="module", params=sorted(TWINS))
def engine_and_twin(request):
    fixture, checkpoint = TWINS[request.param]
    twin = load_adapter(ModelSpec(checkpoint, "ar", checkpoint, "transformers twin", {"enable_thinking": False}), CPU,
                        torch.float32)
    return request.param, request.getfixturevalue(fixture), twin


def test_engine_and_transformers_give_identical_token_ids(engine_and_twin):
    name, engine, hf = engine_and_twin
    config, hf_config = engine.make_config(), hf.make_config()
    batches = [[r for r in REQUESTS if r.canvas_tokens == canvas]  # a batch is one canvas, its requests in flight
               for canvas in dict.fromkeys(r.canvas_tokens for r in REQUESTS)]
    pairs = [pair for batch in batches for pair in zip(batch, engine.generate(batch, config))]
    served = [got for _, got in pairs]
    if name == "tiny-qwen3-vllm":  # the random 152k-vocabulary model practically never draws an end id
        assert [g.hit_max_tokens for g in served].count(False) >= 2  # the end-of-sequence path is exercised
    for request, got in pairs:
        (want,) = hf.generate([request], hf_config)
        assert got.token_ids == want.token_ids
        assert (got.gen_tokens, got.hit_max_tokens, got.text) == (want.gen_tokens, want.hit_max_tokens, want.text)
        if request.prompt is None:
            assert got.prompt_ids_match  # the server's chat template gave the prompt the other adapters render
        assert got.nfe == 0.0 and got.request_latency_s > 0


def test_an_error_answer_is_one_line_naming_the_log(engine):
    too_long = chat("Hello", canvas=5000)  # beyond the tiny model's 4096 positions: the server refuses
    with pytest.raises(EngineError) as caught:
        engine.generate([too_long], engine.make_config())
    message = str(caught.value)
    assert "\n" not in message and "answered HTTP 400" in message
    assert str(engine.engine_folder() / "server.log") in message
    assert engine.server().process.poll() is None  # still serving


def harness(output: Path, *args: str) -> list[str]:
    return [sys.executable, str(REPO / "run_eval.py"), "--tasks", "gsm8k", "--data", "fixtures", "--gen-length",
            "24", "--no-progress", "--output", str(output), *args]


def test_a_run_beside_transformers_matches_and_attributes(engine, tmp_path):
    folder = materialize("tiny-qwen3-h32")
    hf_name = f"hf:{folder}"
    base_url = engine.server().base_url
    command = harness(tmp_path / "run", "--models", f"tiny-qwen3-vllm,{hf_name}", "--limit", "4",
                      "--batch-size", "2", "--model-arg", f"tiny-qwen3-vllm.base_url={base_url}",
                      "--model-arg", f"{hf_name}.enable_thinking=false")
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads((tmp_path / "run" / "results.json").read_text())
    by_model = {r["model"]: r for r in payload["results"]}
    engine_result = by_model["tiny-qwen3-vllm"]
    record = engine_result["manifest"]["engine"]
    assert record["engine"] == "vllm" and record["version"] and record["mode"] == "attached"
    speed = engine_result["speed"]
    assert speed["tokens_per_forward"] is None and speed["forwards_per_sample"] is None
    assert speed["request_latency_s"]["p50"] > 0 and speed["tokens_per_second"] > 0

    def ids(model: str) -> list[list[int]]:
        path = tmp_path / "run" / "samples" / model.replace("/", "_").replace(":", "_") / "gsm8k.jsonl"
        return [json.loads(line)["token_ids"] for line in path.read_text().splitlines()]

    assert ids("tiny-qwen3-vllm") == ids(hf_name)
    pairs = {(a["model"], a["baseline"]): a for a in payload["attribution"]}
    assert set(pairs) == {("tiny-qwen3-vllm", hf_name), (hf_name, "tiny-qwen3-vllm")}
    assert pairs[("tiny-qwen3-vllm", hf_name)]["forwards_factor"] is None  # the engine counts no forwards
    report = (tmp_path / "run" / "report.html").read_text()
    assert "speedup attribution" in report and "no forward count" in report


def numbered_gsm8k(folder: Path, count: int) -> Path:
    """A --data-dir holding `count` GSM8K items in the hub schema: enough that a fast machine is still
    generating when the test kills the server (five fixture items can all finish between two polls)."""
    items = [item for _, item in read_jsonl(REPO / "tasks" / "fixtures" / "gsm8k.jsonl")]
    write_jsonl_atomic(folder / "gsm8k" / "test.jsonl", [{**item, "question": f"({i}) {item['question']}"}
                                                         for i, item in zip(range(count), itertools.cycle(items))])
    return folder


KILLED_RUN_ITEMS = 40


@pytest.mark.slow
def test_a_server_killed_mid_run_keeps_finished_samples_and_the_rerun_resumes(engine, engine_python, tmp_path):
    output = tmp_path / "run"
    data = ["--data", "auto", "--data-dir", str(numbered_gsm8k(tmp_path / "data", KILLED_RUN_ITEMS)),  # local files
            "--limit", str(KILLED_RUN_ITEMS)]
    launched = harness(output, "--models", "tiny-qwen3-vllm", *data,
                       "--warmup", "0", "--model-arg", f"tiny-qwen3-vllm.server_python={engine_python}")
    process = subprocess.Popen(launched, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    record_path = output / "engine" / "tiny-qwen3-vllm" / "engine.json"
    shard = output / "store" / "tiny-qwen3-vllm" / "gsm8k" / "shard-rank0.jsonl"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and process.poll() is None:
        if shard.exists() and len(shard.read_text().splitlines()) >= 2:
            break
        time.sleep(0.02)
    assert process.poll() is None, process.communicate()[1][-2000:]
    pid = json.loads(record_path.read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)
    _, err = process.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert process.returncode == 2 and len(lines) == 1, err[-2000:]
    assert "died" in lines[0] and str(output / "engine" / "tiny-qwen3-vllm" / "server.log") in lines[0]
    records = [json.loads(line) for line in shard.read_text().splitlines()]
    kept = [r["key"] for r in records]
    assert 2 <= len(kept) < KILLED_RUN_ITEMS
    # The cold start (tens of seconds) happened before the first timed sample, not inside it.
    first = records[0]
    assert not first["warmup"] and first["latency_s"] < first["request_latency_s"] + 2.0, first
    assert not live_members(pid, settle_s=10)  # no engine worker outlived its server

    resumed = harness(output, "--models", "tiny-qwen3-vllm", *data,
                      "--model-arg", f"tiny-qwen3-vllm.base_url={engine.server().base_url}")
    done = subprocess.run(resumed, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    keys = [json.loads(line)["key"] for line in shard.read_text().splitlines()]
    assert keys[:len(kept)] == kept and len(keys) == KILLED_RUN_ITEMS  # the finished ones were not generated again
