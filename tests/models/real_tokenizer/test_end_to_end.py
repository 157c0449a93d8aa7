"""The seven tasks end to end on the two tiny models with the released tokenizer: the run completes and scores, and
what it stores agrees with the real tokenizer."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from tasks.registry import PAPER_TASKS

MODELS = ("tiny-qwen3-realtok", "tiny-refusion-realtok")
EOS = {"tiny-qwen3-realtok": {151645, 151643}, "tiny-refusion-realtok": {151645}}


@pytest.mark.slow
def test_all_seven_tasks_run_and_score_on_the_real_tokenizer(qwen3_files, tmp_path, capsys):
    status = main(["--models", ",".join(MODELS), "--tasks", "all", "--limit", "2", "--data", "fixtures",
                   "--gen-length", "32", "--output", str(tmp_path), "--no-progress"])
    assert status == 0
    results = json.loads((tmp_path / "results.json").read_text())["results"]
    assert sorted((r["model"], r["task"]) for r in results) == sorted((m, t) for m in MODELS for t in PAPER_TASKS)
    for result in results:
        assert result["n_samples"] == 2 and result["primary_metric"] in result["metrics"]
        lines = (tmp_path / "samples" / result["model"] / f"{result['task']}.jsonl").read_text().splitlines()
        assert len(lines) == 2
        for record in map(json.loads, lines):
            assert "scores" in record and 1 <= record["gen_tokens"] <= 32
            ids = record["token_ids"]
            assert record["gen_tokens"] == len(ids) and max(ids) < 151936  # real ids, not a local tokenizer's
            assert not set(ids[:-1]) & EOS[result["model"]]  # counted up to the first end-of-sequence id
            assert record["prompt"].startswith("<|im_start|>") and "<|im_end|>" not in record["text"]
    assert "report:" in capsys.readouterr().out
