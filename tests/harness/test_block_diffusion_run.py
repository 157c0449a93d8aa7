"""The block-diffusion families through the command line: listed, checked before any model loads, and run beside
the other families with the same tokens at every batch size."""

from __future__ import annotations

import json

import pytest

import models.adapters.native as native
from harness.cli import main

MODELS = ("tiny-sdar", "tiny-fastdllm-v2", "tiny-refusion", "tiny-qwen3")
TASKS = ("gsm8k", "mbpp")


def test_list_names_the_block_diffusion_models_and_presets(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in ("sdar-8b", "sdar-4b", "sdar-1.7b", "trado-8b", "trado-4b", "fastdllm-v2-7b", "fastdllm-v2-1.5b",
                 "tiny-sdar", "tiny-fastdllm-v2", "presets: paper, readme", "remasking=low_confidence_static"):
        assert name in out


@pytest.mark.parametrize("argument, named", [
    ("tiny-sdar.remasking=lowest_confidence", "remasking"),
    ("tiny-fastdllm-v2.sub_block_length=5", "sub_block_length"),
])
def test_a_bad_value_is_one_line_before_any_model_loads(capsys, tmp_path, monkeypatch, argument, named):
    def never(*args, **kwargs):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr(native, "load_native_network", never)
    monkeypatch.setattr(native, "load_tokenizer", never)
    status = main(["--models", "tiny-sdar,tiny-fastdllm-v2", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "1",
                   "--model-arg", argument, "--output", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith("error: ") and named in err, err


def test_options_and_the_paper_preset_reach_the_manifest(tmp_path, capsys):
    status = main(["--models", "tiny-sdar,tiny-fastdllm-v2", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "1",
                   "--gen-length", "8", "--preset", "paper",
                   "--model-arg", "tiny-sdar.remasking=low_confidence_dynamic",
                   "--output", str(tmp_path / "run"), "--no-progress"])
    assert status == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "run" / "results.json").read_text())["results"]
    decoding = {r["model"]: r["manifest"]["decoding"] for r in results}
    assert decoding["tiny-sdar"]["remasking"] == "low_confidence_dynamic"  # the option wins over the preset
    assert decoding["tiny-fastdllm-v2"]["confidence_threshold"] == 1.0  # the eval script's gsm8k threshold
    assert decoding["tiny-fastdllm-v2"]["block_length"] == 32 and decoding["tiny-fastdllm-v2"]["sub_block_length"] == 8


def generated_ids(folder) -> dict[tuple[str, str, str], list[int]]:
    """(model, task, doc) -> the sample's generated token ids."""
    out = {}
    for model in MODELS:
        for task in TASKS:
            for line in (folder / "samples" / model / f"{task}.jsonl").read_text().splitlines():
                record = json.loads(line)
                out[(model, task, record["doc_id"])] = record["token_ids"]
    return out


@pytest.mark.slow
def test_four_families_give_the_same_tokens_at_batch_1_and_4(tmp_path, capsys):
    folders = {size: tmp_path / f"batch-{size}" for size in (1, 4)}
    for size, folder in folders.items():
        status = main(["--models", ",".join(MODELS), "--tasks", ",".join(TASKS), "--data", "fixtures",
                       "--gen-length", "32", "--batch-size", str(size), "--output", str(folder), "--no-progress"])
        assert status == 0, capsys.readouterr().err
    alone, batched = (generated_ids(folders[size]) for size in (1, 4))
    assert len(alone) == len(MODELS) * 9 and alone == batched  # 5 gsm8k + 4 mbpp fixture items per model
    results = json.loads((folders[4] / "results.json").read_text())["results"]
    assert {(r["model"], r["task"]) for r in results} == {(m, t) for m in MODELS for t in TASKS}
