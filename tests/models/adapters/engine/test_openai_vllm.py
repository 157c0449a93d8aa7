"""openai:<url> against a real OpenAI-compatible server: the CPU vLLM engine serving the tiny Qwen3 (the engine
tests' shared server). Asked through chat completions, with vLLM's token ids requested through ``extra_body``, it
must give the token ids the engine adapter gets from the same server, streamed or not, alone and through a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from adapter_cases import chat
from models.registry import load_adapter, spec_for

REPO = Path(__file__).resolve().parents[4]
IDS = json.dumps({"return_token_ids": True})  # vLLM's extension: the generated ids beside the text


# As the engine's own test: two end in an end-of-sequence id inside the canvas, two fill it (one continues a prefill).
REQUESTS = [chat("Question 10: what is 10 times 13?", 96), chat("Question 29: what is 29 times 32?", 96),
            chat("What is 2 + 2?", canvas=40, system="Answer briefly."),
            chat("Pick one.", canvas=40, prefill="The best answer is")]


def batches(requests):
    return [[r for r in requests if r.canvas_tokens == canvas]
            for canvas in dict.fromkeys(r.canvas_tokens for r in requests)]


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False])
def test_served_over_chat_completions_the_tokens_are_the_engine_adapters(engine, stream):
    served = load_adapter(spec_for(f"openai:{engine.server().base_url}"), torch.device("cpu"), torch.float32)
    config = served.make_config({"enable_thinking": "false", "extra_body": IDS, "stream": str(stream)})
    pairs = [(want, got) for batch in batches(REQUESTS)
             for want, got in zip(engine.generate(batch, engine.make_config()), served.generate(batch, config))]
    assert [want.hit_max_tokens for want, _ in pairs].count(False) >= 2  # the end-of-sequence path is exercised
    for want, got in pairs:
        assert got.token_ids == want.token_ids and got.gen_tokens == len(want.token_ids)
        assert got.hit_max_tokens == want.hit_max_tokens
        assert got.finish_reason == ("length" if want.hit_max_tokens else "stop")
        # the server holds back trailing bytes that complete no character; the rest of the text is the same
        assert want.text.startswith(got.text) and set(want.text[len(got.text):]) <= {"\ufffd"}
        assert got.request_latency_s > 0 and got.retries == 0
        if stream:
            assert 1 <= got.chunks <= got.gen_tokens and 0 < got.first_chunk_s < got.request_latency_s
        else:
            assert got.chunks is None and got.first_chunk_s is None


@pytest.mark.slow
def test_a_run_through_the_server_gives_the_engine_runs_tokens(engine, tmp_path):
    url = engine.server().base_url
    name = f"openai:{url}"
    command = [sys.executable, str(REPO / "run_eval.py"), "--tasks", "gsm8k", "--data", "fixtures", "--gen-length",
               "24", "--no-progress", "--output", str(tmp_path / "run"), "--limit", "4", "--batch-size", "2",
               "--models", f"tiny-qwen3-vllm,{name}", "--model-arg", f"tiny-qwen3-vllm.base_url={url}",
               "--model-arg", f"{name}.enable_thinking=false", "--model-arg", f"{name}.extra_body={IDS}"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["model"]: r for r in json.loads((tmp_path / "run" / "results.json").read_text())["results"]}
    served = results[name]
    assert served["manifest"]["served"]["served_model"] == results["tiny-qwen3-vllm"]["manifest"]["engine"][
        "served_model"]
    assert served["speed"]["chunks"]["mean"] >= 1 and served["speed"]["first_chunk_s"]["p50"] > 0

    def samples(model: str) -> list[dict]:
        path = tmp_path / "run" / "samples" / model.replace("/", "_").replace(":", "_") / "gsm8k.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    assert [s["token_ids"] for s in samples(name)] == [s["token_ids"] for s in samples("tiny-qwen3-vllm")]
    assert [s["gen_tokens"] for s in samples(name)] == [len(s["token_ids"]) for s in samples(name)]
