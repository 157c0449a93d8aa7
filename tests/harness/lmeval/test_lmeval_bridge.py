"""``--tasks lmeval:<task>``: lm-eval's task behind the harness's Task interface. Its prompt, stop strings and
documents are lm-eval's, and the harness's per-sample scores equal lm-eval's own scoring of the stored outputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.model import LM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from harness.cli import UsageError, split_names  # noqa: E402
from tasks.base import TaskPrompt  # noqa: E402
from tasks.records import DataError  # noqa: E402
from tasks.lmeval_bridge import LMEvalTask  # noqa: E402

TASK = "gsm8k_cot_local"  # as in conftest.py
MODEL = "tiny-qwen3"
# Outputs that score differently under the two filters: both right; only the flexible one right; both wrong.
CRAFTED = {0: " 3 + 4 = 7. The answer is 7.", 1: " 12 * 3 = 36 pens in all", 2: " 50 - 18 = 31. The answer is 31."}
CRAFTED_SCORES = [(1.0, 1.0), (0.0, 1.0), (0.0, 0.0)]  # (strict-match, flexible-extract)


class ReplayLM(LM):
    """Answers lm-eval's generation requests with given outputs, by document."""

    def __init__(self, outputs: dict[int, str]):
        super().__init__()
        self.outputs = outputs

    def generate_until(self, requests, disable_tqdm: bool = False):
        return [self.outputs[r.doc_id] for r in requests]

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError


def lm_eval_scoring(outputs: dict[int, str], task_dir: Path) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """lm-eval's own per-document scores ("metric,filter" -> value, plus extraction and target) and aggregates."""
    results = lm_eval.simple_evaluate(
        model=ReplayLM(outputs), tasks=[TASK], task_manager=TaskManager(include_path=str(task_dir),
                                                                        include_defaults=False),
        log_samples=True, bootstrap_iters=0)
    per_doc: dict[int, dict[str, Any]] = {}
    for sample in results["samples"][TASK]:
        entry = per_doc.setdefault(sample["doc_id"], {"scores": {}, "extracted": {}, "target": str(sample["target"])})
        entry["scores"][f"exact_match,{sample['filter']}"] = float(sample["exact_match"])
        entry["extracted"][sample["filter"]] = sample["filtered_resps"][0]
    return per_doc, results["results"][TASK]


def assert_same_scores(harness: list[dict[str, Any]], lm_eval_run: tuple[dict, dict], harness_results: dict) -> None:
    per_doc, aggregate = lm_eval_run
    assert sorted(per_doc) == [int(r["doc_id"]) for r in harness]
    for record in harness:
        theirs = per_doc[int(record["doc_id"])]
        assert record["scores"] == theirs["scores"]
        assert record["extracted"] == theirs["extracted"]
        assert record["target"] == theirs["target"]
    for metric, summary in harness_results["metrics"].items():
        assert summary["value"] == pytest.approx(aggregate[metric])


def test_the_task_is_lm_evals(task_dir, items):
    task = LMEvalTask.from_name(TASK, include=[str(task_dir)])
    data = task.load("auto", None)
    docs = task.docs(data.records)
    assert [d.data["question"] for d in docs] == [i["question"] for i in items]
    assert [d.id for d in docs] == ["0", "1", "2"]
    assert task.prompt(docs[1]) == TaskPrompt(user=f"Q: {items[1]['question']}\nA:", stop=("Q:", "</s>", "<|im_end|>"))
    assert task.name == f"lmeval:{TASK}" and task.canvas_tokens == 512 and data.source == "lm-eval"
    assert task.metrics == ("exact_match,strict-match", "exact_match,flexible-extract")
    assert task.primary_metric == "exact_match,strict-match"
    with pytest.raises(DataError, match="no bundled fixtures"):
        task.load("fixtures", None)


def test_cli_accepts_lmeval_task_names_only_for_tasks():
    assert split_names("gsm8k,lmeval:gsm8k_cot", ["gsm8k"], "task") == ("gsm8k", "lmeval:gsm8k_cot")
    with pytest.raises(UsageError, match="unknown model lmeval:x"):
        split_names("lmeval:x", ["qwen3"], "model", allow_hf=True)


def test_harness_scores_equal_lm_evals(harness_run, run_harness, read_samples, task_dir, tmp_path):
    output = harness_run(MODEL)
    generated = read_samples(output, MODEL)
    results = json.loads((output / "results.json").read_text())["results"][0]
    assert_same_scores(generated, lm_eval_scoring({int(r["doc_id"]): r["text"] for r in generated}, task_dir),
                       results)

    # The random tiny model scores 0 everywhere; stored outputs that score 1 under one filter or both, rescored.
    run = tmp_path / "run"
    shutil.copytree(output, run)
    for shard in run.glob("store/*/*/shard-*.jsonl"):
        records = [json.loads(line) for line in shard.read_text().splitlines()]
        shard.write_text("".join(json.dumps({**r, "text": CRAFTED[int(r["doc_id"])]}) + "\n" for r in records))
    run_harness(MODEL, run, "--rescore")
    rescored = read_samples(run, MODEL)
    assert [(r["scores"]["exact_match,strict-match"], r["scores"]["exact_match,flexible-extract"])
            for r in rescored] == CRAFTED_SCORES
    assert [r["diagnostics"]["invalid"] for r in rescored] == [False, True, False]
    results = json.loads((run / "results.json").read_text())["results"][0]
    assert_same_scores(rescored, lm_eval_scoring(CRAFTED, task_dir), results)
