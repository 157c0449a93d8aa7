"""``--samples K``: K requests per item, each with its own key and seed, reproducible alone and at any batch size or
schedule; a one-sample run keeps its keys; a larger K extends a stored run; the presets set K; results.json carries
the repeated figures."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.run.runner import RunSettings, Runner, plan
from harness.run.store import sample_key
from models.base import GenerationRequest, Message, row_seeds, sample_identity
from models.decoders.sampling import row_seed
from models.options import record as decoding_record
from models.registry import load_adapter, spec_for
from tasks.registry import make_task

SAMPLED = ["--model-arg", "do_sample=true", "--model-arg", "temperature=1.5"]


def run(capsys, output: Path, *extra: str, limit: int = 2) -> tuple[str, dict]:
    status = main(["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--limit", str(limit),
                   "--gen-length", "8", "--no-progress", "--output", str(output), *extra])
    out = capsys.readouterr()
    assert status == 0, out.err
    return out.out, json.loads((output / "results.json").read_text())["results"][0]


def scored(output: Path) -> list[dict]:
    lines = (output / "samples/tiny-qwen3/gsm8k.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def by_request(records: list[dict]) -> dict[tuple[str, int], list[int]]:
    return {(r["doc_id"], r.get("sample", 0)): r["token_ids"] for r in records}


def test_one_sample_keeps_its_keys_and_the_first_of_k_is_it():
    adapter = load_adapter(spec_for("tiny-qwen3"), torch.device("cpu"), torch.float32)
    task = make_task("gsm8k")
    docs = task.docs(task.load("fixtures", None).records)[:2]
    decoding = decoding_record(adapter.make_config({}, 8, 1234))
    one = plan(task, docs, adapter, decoding, 8, 1234)
    three = plan(task, docs, adapter, decoding, 8, 1234, samples=3)
    # the key as one-sample runs computed it, part for part (no sample index)
    before = [sample_key(model=adapter.identity(), decoding=decoding, task=task.name, task_version=task.version,
                         doc=doc.id, prompt=dataclasses.asdict(task.prompt(doc)), canvas=8, seed=1234, batch_size=1)
              for doc in docs]
    assert [p.key for p in one] == before
    assert [(p.doc.id, p.sample) for p in three] == [(d.id, k) for d in docs for k in range(3)]
    assert [p.key for p in three if p.sample == 0] == before
    assert len({p.key for p in three}) == 6
    assert [p.request.sample for p in three] == [0, 1, 2, 0, 1, 2]


def test_each_sample_draws_its_own_seed_and_the_first_the_one_sample_seed():
    adapter = load_adapter(spec_for("tiny-qwen3"), torch.device("cpu"), torch.float32)
    config = adapter.make_config({"do_sample": True}, 8, 1234)
    seeds = row_seeds(config, ["p", "p", "p", "q"], [0, 1, 2, 0])
    assert seeds[0] == row_seed(1234, "p") and seeds[3] == row_seed(1234, "q")  # the seeds K = 1 always had
    assert seeds[1] == row_seed(1234, "p\0sample 1") and len(set(seeds)) == 4
    request = GenerationRequest(messages=(Message("user", "hi"),), canvas_tokens=8, sample=2)
    batch = adapter.prepare([dataclasses.replace(request, sample=0), request], config)
    assert batch.row_seeds == (row_seed(1234, batch.prompts[0]),
                               row_seed(1234, sample_identity(batch.prompts[0], 2)))


@pytest.mark.parametrize("schedule", ["continuous", "static"])
def test_samples_are_the_same_alone_and_in_any_batch(capsys, tmp_path, schedule):
    printed, alone = run(capsys, tmp_path / "alone", "--samples", "3", *SAMPLED)
    _, batched = run(capsys, tmp_path / "batched", "--samples", "3", "--batch-size", "4", "--schedule", schedule,
                     *SAMPLED)
    one, many = by_request(scored(tmp_path / "alone")), by_request(scored(tmp_path / "batched"))
    assert sorted(one) == [(doc, k) for doc in sorted({d for d, _ in one}) for k in range(3)]
    assert one == many
    for doc in {d for d, _ in one}:  # sampled at T 1.5 on a random network: an item's samples differ
        assert len({tuple(one[doc, k]) for k in range(3)}) > 1
    assert alone["n_samples"] == 6 and alone["manifest"]["samples"] == 3
    repeated = alone["repeated"]
    assert repeated["samples_per_item"] == 3 and repeated["items"] == 2 and repeated["metric"] == alone[
        "primary_metric"]
    assert sorted(repeated["pass_at"]) == ["1", "2", "3"]
    assert repeated["avg"] == alone["metrics"][alone["primary_metric"]]
    assert repeated["avg"]["n"] == 2  # items, not samples
    table = printed.splitlines()
    assert "pass@K" in table[-4] and "maj@K" in table[-4]  # the summary table's header, then the row
    assert "avg@3 exact_match,flexible-extract" in table[-3] and " 2x3 " in table[-3]


def test_a_larger_k_extends_a_stored_run(capsys, tmp_path):
    output = tmp_path / "run"
    _, first = run(capsys, output, "--samples", "2", *SAMPLED)
    before = by_request(scored(output))
    out, second = run(capsys, output, "--samples", "3", *SAMPLED)
    assert "4 of 6 samples already stored, resuming with 2 left" in out
    after = by_request(scored(output))
    assert {k: v for k, v in after.items() if k[1] < 2} == before
    assert second["repeated"]["samples_per_item"] == 3 and second["n_samples"] == 6
    _, one = run(capsys, output, *SAMPLED)  # K = 1 reads the first samples back, generating nothing
    assert by_request(scored(output)) == {k: v for k, v in before.items() if k[1] == 0}
    assert "repeated" not in one and "samples" not in one["manifest"]


def test_greedy_samples_are_said_to_be_identical(capsys, tmp_path):
    out, result = run(capsys, tmp_path / "run", "--samples", "2", limit=1)
    assert "tiny-qwen3: its decoding draws nothing at random (temperature 0), so its 2 samples of an item will " \
           "be identical" in out
    tokens = by_request(scored(tmp_path / "run"))
    assert tokens[next(iter(tokens))[0], 0] == tokens[next(iter(tokens))[0], 1]
    assert result["repeated"]["agreement"]["mixed"] == 0.0


def test_samples_below_one_is_one_line(capsys, tmp_path):
    status = main(["--models", "tiny-qwen3", "--tasks", "gsm8k", "--samples", "0", "--output", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.count("\n") == 0 and "--samples must be at least 1, got 0" in err


def test_the_paper_preset_sets_k_per_task_and_samples_overrides_it(tmp_path):
    def planned(samples: int | None) -> dict[str, int]:
        settings = RunSettings(models=("tiny-qwen3",), tasks=("aime24", "gsm8k"), output=tmp_path / "r",
                               data="fixtures", preset="paper", progress=False, samples=samples)
        return {job.task.name: job.samples for job in Runner(settings).plan_all()}

    assert planned(None) == {"aime24": 64, "gsm8k": 1}
    assert planned(2) == {"aime24": 2, "gsm8k": 2}
