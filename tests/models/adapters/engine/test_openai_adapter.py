"""openai:<url> against a small OpenAI-compatible server written here (http.server in a thread): it streams its
answer in blocks of several tokens, as a block-diffusion server does, and fails on purpose. The adapter's figures are
checked against what the server did (the chunks it sent, the tokens it counted, the requests it saw at once), and
every failure a user can meet is one line on stderr before any item runs."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
import torch

from harness.cli import main
from models.adapters.engine.openai_adapter import OpenAIAdapter, request_body
from models.adapters.engine.openai_client import RequestFailed, with_retries
from models.adapters.engine.server import free_port
from models.base import GenerationRequest, Message, TemplateOptions
from models.decoders.contract import ConfigError
from models.options import record
from models.registry import load_adapter, spec_for
from models.sources import ModelLoadError

MODEL = "block-model"
BLOCK = 4  # tokens per streamed chunk
WORDS = [f"w{i} " for i in range(64)]  # the server's "tokens": each answer is the first max_tokens of these


@dataclass
class Behaviour:
    """What the server does; the counters say what it saw."""

    fail_with_500: int = 0  # the first N generation requests answer 500
    drop: int = 0  # the next N generation requests get their connection closed without an answer
    usage: bool = True
    status_400: bool = False
    answer_words: int = 10  # tokens in an answer that is not cut by max_tokens or a stop string
    models: tuple[str, ...] = (MODEL,)  # what GET /models lists
    stop_at: int | None = None  # the answer holds "STOP" after this many words (a stop string to honour)
    requests: list[dict] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def answer_tokens(b: Behaviour, payload: dict) -> tuple[list[str], str]:
    words = WORDS[:b.answer_words]
    if b.stop_at is not None:
        words = words[:b.stop_at] + ["STOP "] + words[b.stop_at:]
    reason = "stop"
    for stop in payload.get("stop") or []:
        text = "".join(words)
        if stop in text:
            cut = text.index(stop)
            kept = [w for i, w in enumerate(words) if len("".join(words[:i + 1])) <= cut]
            words = kept + [words[len(kept)]]  # the token holding the stop string is generated, then cut
            break
    if len(words) > payload["max_tokens"]:
        words, reason = words[:payload["max_tokens"]], "length"
    return words, reason


def visible(words: list[str], payload: dict) -> str:
    text = "".join(words)
    for stop in payload.get("stop") or []:
        text = text.split(stop)[0]
    return text


class Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour

    def log_message(self, *args) -> None:  # quiet
        pass

    def send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": m, "object": "model"}
                                                            for m in self.behaviour.models]})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        b = self.behaviour
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with b.lock:
            b.requests.append(payload)
            b.authorization.append(self.headers.get("Authorization"))
            b.in_flight += 1
            b.most_in_flight = max(b.most_in_flight, b.in_flight)
            fail, b.fail_with_500 = b.fail_with_500 > 0, max(0, b.fail_with_500 - 1)
            drop, b.drop = b.drop > 0, max(0, b.drop - 1)
        try:
            time.sleep(0.05)  # long enough for the batch's other requests to arrive
            if drop:
                self.close_connection = True
                self.connection.close()
                return
            if fail:
                return self.send_json(500, {"error": {"message": "engine hiccup"}})
            if b.status_400 or payload.get("model") != MODEL:
                return self.send_json(400 if b.status_400 else 404, {"error": {"message": "bad request"}})
            words, reason = answer_tokens(b, payload)
            usage = {"prompt_tokens": 7, "completion_tokens": len(words), "total_tokens": 7 + len(words)}
            if payload.get("stream"):
                return self.stream(words, reason, usage if b.usage else None, payload)
            self.send_json(200, {"choices": [{"index": 0, "message": {"role": "assistant",
                                                                      "content": visible(words, payload)},
                                              "finish_reason": reason}], **({"usage": usage} if b.usage else {})})
        finally:
            with b.lock:
                b.in_flight -= 1

    def stream(self, words: list[str], reason: str, usage: dict | None, payload: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def event(body: dict) -> None:
            self.wfile.write(f"data: {json.dumps(body)}\n\n".encode())
            self.wfile.flush()

        event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        text = visible(words, payload)
        for start in range(0, len(words), BLOCK):  # a block of tokens per chunk
            piece = "".join(words[start:start + BLOCK])
            piece = piece[:max(0, len(text) - len("".join(words[:start])))]
            time.sleep(0.01)
            event({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        event({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
        if usage is not None:  # stream_options.include_usage: the last chunk, with no choices
            event({"choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")


@contextmanager
def serving(behaviour: Behaviour) -> Iterator[str]:
    handler = type("BoundHandler", (Handler,), {"behaviour": behaviour})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def served(url: str) -> OpenAIAdapter:
    return load_adapter(spec_for(f"openai:{url}"), torch.device("cpu"), torch.float32)


def chat(text: str, canvas: int = 32, stop: tuple[str, ...] = ()) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),), canvas_tokens=canvas, stop=stop)


FAST = {"retry_backoff_s": 0.01}


# ---- the adapter on its own ------------------------------------------------------------------------------------
def test_a_streamed_answer_counts_its_blocks_and_times_its_first_chunk():
    b = Behaviour(answer_words=10)
    with serving(b) as url:
        (got,) = served(url).generate([chat("hi")], served(url).make_config(FAST))
    assert got.text == "".join(WORDS[:10]) and got.gen_tokens == got.gen_tokens_after_stop == 10
    assert got.chunks == 3 and got.tokens_per_chunk == pytest.approx(10 / 3)  # blocks of 4, 4 and 2 tokens
    assert 0 < got.first_chunk_s < got.request_latency_s
    assert got.request_tokens_per_second == pytest.approx(10 / got.request_latency_s)
    assert not got.hit_max_tokens and got.finish_reason == "stop" and got.retries == 0 and got.token_ids == []
    sent = b.requests[-1]  # the probe came first
    assert sent["stream"] and sent["stream_options"] == {"include_usage": True} and sent["max_tokens"] == 32
    assert sent["temperature"] == 0.0 and sent["model"] == MODEL and "seed" not in sent


def test_unstreamed_the_answer_is_one_chunk_without_a_first_chunk_time():
    with serving(Behaviour(answer_words=12)) as url:
        adapter = served(url)
        (got,) = adapter.generate([chat("hi", canvas=8)], adapter.make_config({"stream": "false"}))
    assert got.gen_tokens == 8 and got.hit_max_tokens and got.finish_reason == "length"
    assert got.chunks is None and got.first_chunk_s is None and got.request_latency_s > 0


def test_the_stop_strings_go_to_the_server_and_its_count_is_kept():
    b = Behaviour(answer_words=10, stop_at=3)
    with serving(b) as url:
        adapter = served(url)
        (got,) = adapter.generate([chat("hi", stop=("STOP",))], adapter.make_config(FAST))
    assert b.requests[-1]["stop"] == ["STOP"]
    assert got.text == "".join(WORDS[:3]) and got.gen_tokens == 4  # three words and the one holding the stop


def test_a_500_is_retried_with_backoff_and_the_retry_is_recorded():
    b = Behaviour(answer_words=5)
    with serving(b) as url:
        adapter = served(url)
        config = adapter.make_config(FAST)
        adapter.generate([chat("warm")], config)  # connects and probes first
        b.fail_with_500 = 1
        (got,) = adapter.generate([chat("hi")], config)
    assert got.retries == 1 and got.gen_tokens == 5 and len(b.requests) == 4  # probe, warm, 500, success


def test_a_dropped_connection_is_retried():
    b = Behaviour(answer_words=5)
    with serving(b) as url:
        adapter = served(url)
        config = adapter.make_config(FAST)
        adapter.generate([chat("warm")], config)
        b.drop = 2
        (got,) = adapter.generate([chat("hi")], config)
    assert got.retries == 2 and got.text == "".join(WORDS[:5])


def test_retries_wait_longer_each_time_and_stop_at_the_limit_or_at_a_4xx():
    waits: list[float] = []

    def failing(status: int | None):
        def send():
            raise RequestFailed("nope", status)
        return send

    with pytest.raises(RequestFailed) as caught:
        with_retries(failing(None), 3, 0.5, sleep=waits.append)
    assert waits == [0.5, 1.0, 2.0] and caught.value.attempts == 4
    waits.clear()
    with pytest.raises(RequestFailed) as caught:
        with_retries(failing(503), 1, 0.5, sleep=waits.append)
    assert waits == [0.5] and caught.value.attempts == 2
    waits.clear()
    with pytest.raises(RequestFailed) as caught:
        with_retries(failing(400), 3, 0.5, sleep=waits.append)
    assert waits == [] and caught.value.attempts == 1


def test_requests_carry_the_decoding_the_prefill_and_the_template_switch():
    adapter = served("http://127.0.0.1:9/v1#m")
    sampled = adapter.make_config({"temperature": "0.7", "top_p": "0.9", "extra_body": '{"top_k": 20}'}, canvas=16,
                                  seed=5)
    prefill = GenerationRequest(messages=(Message("user", "q"), Message("assistant", "The answer is")),
                                canvas_tokens=16, stop=("\n",))
    route, body = request_body(prefill, TemplateOptions(enable_thinking=False), "m", sampled.decoder)
    assert route == "/chat/completions" and body["seed"] == 5 and body["top_k"] == 20 and body["top_p"] == 0.9
    assert body["continue_final_message"] and not body["add_generation_prompt"] and body["stop"] == ["\n"]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    route, body = request_body(GenerationRequest(prompt="text", canvas_tokens=4), TemplateOptions(), "m",
                               adapter.make_config(canvas=4).decoder)
    assert route == "/completions" and body["prompt"] == "text" and "messages" not in body
    # where and how to ask never enters the sample key; what is asked does
    assert record(adapter.make_config({"stream": "false", "max_retries": "0"}, canvas=4)) == \
        record(adapter.make_config(canvas=4))
    assert record(sampled)["temperature"] == 0.7
    with pytest.raises(ConfigError, match="extra_body must be a JSON object"):
        adapter.make_config({"extra_body": "[1]"}, canvas=4)


@pytest.mark.parametrize("name", ["openai:localhost:8000/v1", "openai:ftp://h/v1", "openai:"])
def test_a_name_that_is_no_server_address_is_one_line(name):
    with pytest.raises(ModelLoadError, match="is not a server address"):
        served(name.removeprefix("openai:"))


# ---- through the harness ---------------------------------------------------------------------------------------
RUN = ["--tasks", "gsm8k", "--data", "fixtures", "--limit", "3", "--gen-length", "16", "--no-progress"]


def run(capsys, output: Path, *args: str) -> tuple[int, str]:
    code = main([*RUN, "--output", str(output), *args])
    return code, capsys.readouterr().err.strip()


def test_a_run_keeps_n_requests_in_flight_and_records_served_speed(capsys, tmp_path):
    b = Behaviour(answer_words=10)
    with serving(b) as url:
        name = f"openai:{url}"
        code, err = run(capsys, tmp_path / "run", "--models", name, "--batch-size", "2", "--warmup", "0",
                        "--model-arg", f"{name}.retry_backoff_s=0.01")
    assert code == 0, err
    assert b.most_in_flight == 2  # the batch's two requests at once
    result = json.loads((tmp_path / "run" / "results.json").read_text())["results"][0]
    manifest, speed = result["manifest"], result["speed"]
    assert manifest["implementation"]["network"] == "served" and manifest["served"]["over"] == "http"
    assert manifest["served"]["served_model"] == MODEL and manifest["served"]["streamed"]
    assert manifest["model"]["kind"] == "openai" and manifest["model"]["fingerprint"] == f"served:{url}#*"
    assert speed["chunks"]["p50"] == 3 and speed["first_chunk_s"]["p50"] > 0 and speed["tokens_per_forward"] is None
    assert speed["request_tokens_per_second"]["mean"] > 0 and speed["tokens_per_second"] > 0
    assert speed["retries"] == 0 and speed["gen_tokens_mean"] == 10
    lines = (tmp_path / "run" / "samples" / f"openai_{url}".replace(":", "_").replace("/", "_")
             / "gsm8k.jsonl").read_text().splitlines()
    samples = [json.loads(line) for line in lines]
    assert [s["gen_tokens"] for s in samples] == [10, 10, 10] and all(s["chunks"] == 3 for s in samples)
    assert json.loads(samples[0]["prompt"])[-1]["role"] == "user"  # the messages the server rendered


@pytest.mark.slow
def test_the_report_keeps_served_speed_apart_from_in_process_speed(capsys, tmp_path):
    with serving(Behaviour(answer_words=10)) as url:
        name = f"openai:{url}"
        code, err = run(capsys, tmp_path / "run", "--models", f"tiny-qwen3,{name}", "--batch-size", "2")
    assert code == 0, err
    payload = json.loads((tmp_path / "run" / "results.json").read_text())
    assert payload["attribution"] == []  # tiny-qwen3 is a baseline, but the served model is not split against it
    tables = (tmp_path / "run" / "report_tables.md").read_text()
    speed, served = tables.split("## Speed\n")[1].split("## Diagnostics")[0].split(
        "## Speed of models served over HTTP\n")
    assert "tiny-qwen3" in speed and url not in speed
    assert url in served and "first chunk p50 s" in served and "tiny-qwen3" not in served
    grid = tables.split("## Accuracy and throughput")[1].split("## Speed")[0]
    assert grid.count("tok/s (served over HTTP)") == 2 and grid.count("tok/s") == 4  # its cell and average
    report = (tmp_path / "run" / "report.html").read_text()
    assert "Models served over HTTP" in report and "tok/s (served over HTTP)" in report


def test_a_server_that_is_not_there_is_one_line_before_any_item(capsys, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    code, err = run(capsys, tmp_path / "run", "--models", f"openai:{url}", "--model-arg", "max_retries=1",
                    "--model-arg", "retry_backoff_s=0.01")
    assert code == 2 and len(err.splitlines()) == 1 and f"no server answers at {url}" in err
    assert not (tmp_path / "run").exists()


def test_a_model_the_server_does_not_serve_is_one_line_naming_what_it_serves(capsys, tmp_path):
    b = Behaviour()
    with serving(b) as url:
        code, err = run(capsys, tmp_path / "run", "--models", f"openai:{url}#other")
    assert code == 2 and len(err.splitlines()) == 1
    assert "does not serve other" in err and MODEL in err and not b.requests  # nothing was generated
    assert not (tmp_path / "run").exists()


def test_a_server_of_several_models_asks_which(capsys, tmp_path):
    b = Behaviour(models=(MODEL, "other"))
    with serving(b) as url:
        code, err = run(capsys, tmp_path / "run", "--models", f"openai:{url}")
        assert code == 2 and len(err.splitlines()) == 1
        assert f"lists several models ({MODEL}, other)" in err and f"openai:{url}#MODEL" in err
        code, err = run(capsys, tmp_path / "run", "--models", f"openai:{url}#{MODEL}")
    assert code == 0, err


@pytest.mark.parametrize("stream", ["true", "false"])
def test_an_answer_without_usage_is_one_line_before_any_item(capsys, tmp_path, stream):
    b = Behaviour(usage=False)
    with serving(b) as url:
        name = f"openai:{url}#{MODEL}"
        code, err = run(capsys, tmp_path / "run", "--models", name, "--model-arg", f"{name}.stream={stream}")
    assert code == 2 and len(err.splitlines()) == 1 and "answers without usage" in err
    assert len(b.requests) == 1  # the probe only
    assert ("stream=false" in err) == (stream == "true")
    assert not (tmp_path / "run").exists()


def test_a_request_the_server_refuses_is_not_retried_and_is_one_line(capsys, tmp_path):
    b = Behaviour(status_400=True)
    with serving(b) as url:
        code, err = run(capsys, tmp_path / "run", "--models", f"openai:{url}")
    assert code == 2 and len(err.splitlines()) == 1 and "HTTP 400: bad request" in err and len(b.requests) == 1


def test_served_models_are_valid_model_names_and_listed():
    from harness.cli import list_registry, split_names
    from models.registry import model_names

    name = "openai:http://127.0.0.1:8000/v1#org/model-1.5"
    assert split_names(name, model_names(), "model", allow_hf=True) == (name,)
    assert spec_for(name).kind == "openai"
    listing = list_registry()
    assert "openai:<url>[#<model>]" in listing and "api_key_env" in listing


def test_the_api_key_is_read_from_the_variable_named_and_sent_as_a_bearer_token(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("DLLM_TEST_KEY", raising=False)
    b = Behaviour(answer_words=3)
    with serving(b) as url:
        name = f"openai:{url}"
        code, err = run(capsys, tmp_path / "run", "--models", name, "--model-arg", f"{name}.api_key_env=DLLM_TEST_KEY")
        assert code == 2 and len(err.splitlines()) == 1 and "DLLM_TEST_KEY, which is not set" in err
        assert not b.requests and not (tmp_path / "run").exists()
        monkeypatch.setenv("DLLM_TEST_KEY", "secret")
        adapter = served(url)
        adapter.generate([chat("hi")], adapter.make_config({"api_key_env": "DLLM_TEST_KEY"}))
    assert b.authorization == ["Bearer secret", "Bearer secret"]  # the probe and the request
