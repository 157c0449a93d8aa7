"""Every user mistake ends in exit status 2 and one line on stderr that names the problem and the way out."""

from __future__ import annotations

import json

import pytest

from harness.cli import main


def one_line_error(capsys, argv: list[str]) -> str:
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def base(tmp_path, *extra: str) -> list[str]:
    return ["--output", str(tmp_path / "run"), "--no-progress", "--limit", "1", "--gen-length", "4", *extra]


def test_unknown_model_lists_valid_names(capsys, tmp_path):
    err = one_line_error(capsys, ["--models", "refusionn", "--tasks", "gsm8k", *base(tmp_path)])
    assert "refusionn" in err and "tiny-qwen3" in err and "qwen3" in err


def test_unknown_task_lists_valid_names(capsys, tmp_path):
    err = one_line_error(capsys, ["--models", "tiny-qwen3", "--tasks", "gsm8k,gsm9k", *base(tmp_path)])
    assert "gsm9k" in err and "gsm8k" in err


def test_missing_local_model_path(capsys, tmp_path):
    missing = tmp_path / "no-such-model"
    err = one_line_error(capsys, ["--models", f"hf:{missing}", "--tasks", "gsm8k", "--data", "fixtures",
                                  *base(tmp_path)])
    assert str(missing) in err and "does not exist" in err


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"question": "q", "answer": "#### 1"}\n{"question": "q2", "answer": \n', ":2: not valid JSON"),
        ('{"question": "q", "answer": "#### 1"}\n{"question": "q2"}\n', ":2: missing field 'answer'"),
    ],
)
def test_malformed_data_file_names_file_line_and_field(capsys, tmp_path, content, expected):
    (tmp_path / "data" / "gsm8k").mkdir(parents=True)
    path = tmp_path / "data" / "gsm8k" / "test.jsonl"
    path.write_text(content)
    err = one_line_error(capsys, ["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data-dir",
                                  str(tmp_path / "data"), *base(tmp_path)])
    assert str(path) + expected in err


def test_bad_model_arg_key_lists_valid_options(capsys, tmp_path):
    err = one_line_error(capsys, ["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures",
                                  "--model-arg", "tiny-qwen3.slot_sise=4", *base(tmp_path)])
    assert "slot_sise" in err and "do_sample" in err and "temperature" in err


def test_model_arg_for_a_model_not_in_the_run(capsys, tmp_path):
    err = one_line_error(capsys, ["--models", "tiny-qwen3", "--tasks", "gsm8k", "--model-arg", "qwen3.top_k=3",
                                  *base(tmp_path)])
    assert "qwen3" in err and "not in --models" in err


def test_model_arg_values_are_typed_and_reach_the_manifest(capsys, tmp_path):
    status = main(["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--model-arg",
                   "tiny-qwen3.do_sample=true", "--model-arg", "tiny-qwen3.temperature=0.7", *base(tmp_path)])
    assert status == 0
    decoding = json.loads((tmp_path / "run" / "results.json").read_text())["results"][0]["manifest"]["decoding"]
    assert decoding["do_sample"] is True and decoding["temperature"] == 0.7 and decoding["seed"] == 1234


def test_list_names_models_tasks_and_every_decoding_option(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for expected in ("tiny-refusion", "llada-fastdllm", "mbpp_plus", "lmeval:<task>", "slot_size=8",
                     "cache=dual", "enable_thinking=False"):
        assert expected in out
