"""Engine-adapter failures that need no engine: each is one line on stderr, exit 2, naming the way out."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from harness.cli import main
from models.adapters.engine.server import free_port
from models.adapters.engine.openai_client import error_message
from models.adapters.engine.vllm_adapter import answer_ids, chat_payload
from models.base import GenerationRequest, Message, TemplateOptions
from models.decoders.contract import ConfigError
from models.options import record
from models.registry import load_adapter, spec_for

RUN = ["--tasks", "gsm8k", "--data", "fixtures", "--limit", "2", "--gen-length", "8", "--no-progress"]


def run(capsys, tmp_path, *args: str) -> tuple[int, str]:
    code = main([*RUN, "--output", str(tmp_path / "run"), *args])
    return code, capsys.readouterr().err.strip()


def test_no_server_given_is_found_before_any_model_loads(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("DLLM_VLLM_PYTHON", raising=False)
    code, err = run(capsys, tmp_path, "--models", "tiny-qwen3-vllm")
    assert code == 2 and len(err.splitlines()) == 1
    assert "server_python" in err and "DLLM_VLLM_PYTHON" in err and "base_url" in err
    assert not (tmp_path / "run" / "store").exists()


def test_a_missing_server_python_is_found_before_any_model_loads(capsys, tmp_path):
    code, err = run(capsys, tmp_path, "--models", "vllm:tiny-qwen3-h32",
                    "--model-arg", f"vllm:tiny-qwen3-h32.server_python={tmp_path / 'nope' / 'python'}")
    assert code == 2 and len(err.splitlines()) == 1 and "is not an executable file" in err


def test_unknown_option_lists_decoding_and_launch_options(capsys, tmp_path):
    code, err = run(capsys, tmp_path, "--models", "tiny-qwen3-vllm", "--model-arg", "tiny-qwen3-vllm.temperature=1",
                    "--model-arg", "tiny-qwen3-vllm.base_url=http://127.0.0.1:9/v1")
    assert code == 2 and "unknown option temperature" in err and "server_python" in err and "enable_thinking" in err


def test_a_server_that_never_becomes_healthy_names_its_log(capsys, tmp_path):
    # This Python has no vllm: the server exits at once, and the one line points at the log that says why.
    code, err = run(capsys, tmp_path, "--models", "tiny-qwen3-vllm",
                    "--model-arg", f"tiny-qwen3-vllm.server_python={sys.executable}")
    log = tmp_path / "run" / "engine" / "tiny-qwen3-vllm" / "server.log"
    assert code == 2 and len(err.splitlines()) == 1
    assert "exited with status" in err and str(log) in err
    assert "No module named" in log.read_text()


def test_attaching_to_nothing_says_so(capsys, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    code, err = run(capsys, tmp_path, "--models", "tiny-qwen3-vllm", "--model-arg", f"tiny-qwen3-vllm.base_url={url}")
    assert code == 2 and len(err.splitlines()) == 1 and f"no healthy engine server at {url}" in err


def test_requests_are_greedy_ask_for_token_ids_and_pass_the_template_switch():
    chat = GenerationRequest(messages=(Message("user", "hi"),), canvas_tokens=7, stop=("\n",))
    payload = chat_payload(chat, TemplateOptions(enable_thinking=False), "m", [5, 6])
    assert payload["temperature"] == 0.0 and payload["top_k"] == 0 and payload["repetition_penalty"] == 1.0
    assert payload["return_token_ids"] and payload["stop_token_ids"] == [5, 6] and payload["max_tokens"] == 7
    assert payload["chat_template_kwargs"] == {"enable_thinking": False} and "stop" not in payload  # cut locally
    assert payload["add_generation_prompt"] and not payload["continue_final_message"]
    prefill = GenerationRequest(messages=(Message("user", "hi"), Message("assistant", "So")))
    payload = chat_payload(prefill, TemplateOptions(enable_thinking=None), "m", [5])
    assert payload["continue_final_message"] and not payload["add_generation_prompt"]
    assert "chat_template_kwargs" not in payload
    rendered = chat_payload(GenerationRequest(prompt="text"), TemplateOptions(), "m", [5])
    assert rendered["prompt"] == "text" and "messages" not in rendered and rendered["add_special_tokens"] is False


def test_launch_options_are_typed_but_no_part_of_sample_keys():
    adapter = load_adapter(spec_for("tiny-qwen3-vllm"), torch.device("cpu"), torch.float32)
    attached = adapter.make_config({"base_url": "http://127.0.0.1:9/v1", "startup_timeout_s": "5"}, canvas=8)
    assert attached.decoder.startup_timeout_s == 5.0 and attached.decoder.base_url == "http://127.0.0.1:9/v1"
    launched = adapter.make_config({"server_python": sys.executable, "server_args": "--max-model-len 64"}, canvas=8)
    assert record(attached) == record(launched) == {"enable_thinking": False, "max_new_tokens": 8}
    with pytest.raises(ConfigError, match="startup_timeout_s=soon is not a float"):
        adapter.make_config({"startup_timeout_s": "soon"})
    with pytest.raises(ConfigError, match="base_url must look like http"):
        adapter.make_config({"base_url": "localhost:8000"}, canvas=8)


def test_answers_and_error_bodies_are_read_in_both_shapes():
    chat = {"prompt_token_ids": [1, 2], "choices": [{"token_ids": [3, 4]}]}
    completion = {"choices": [{"token_ids": [3], "prompt_token_ids": [1]}]}
    assert answer_ids(chat) == ([3, 4], [1, 2]) and answer_ids(completion) == ([3], [1])
    nested = json.dumps({"error": {"message": "too\nlong", "code": 400}}).encode()
    assert error_message(nested) == "too long"
    assert error_message(json.dumps({"object": "error", "message": "bad"}).encode()) == "bad"
    assert error_message(b"<html>oops</html>") == "<html>oops</html>"


@pytest.mark.parametrize("name", ["vllm:some/model", "tiny-qwen3-vllm", "qwen3-vllm"])
def test_engine_names_are_valid_model_names(name):
    from harness.cli import split_names
    from models.registry import model_names

    assert split_names(name, model_names(), "model", allow_hf=True) == (name,)
    assert spec_for(name).kind == "vllm"
