"""A decode that runs out of memory keeps what finished, halves the rows and retries what was in flight; the run
says where it settled; a single row that does not fit is one line. Driven by the DLLM_INJECT_OOM test hook."""

from __future__ import annotations

import json

import pytest
import torch

from harness.cli import main
from harness.errors import RunError
from harness.run.memory import INJECT_OOM_ENV, DecodeCalls, RowBudget, OutOfMemoryAtOneRow

ITEMS = 5  # the gsm8k fixture items


def run(capsys, output, *extra: str) -> tuple[int, str, str]:
    status = main(["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--gen-length", "8",
                   "--no-progress", "--output", str(output), *extra])
    out = capsys.readouterr()
    return status, out.out, out.err


def store_lines(output) -> list[dict]:
    return [json.loads(line) for path in sorted(output.glob("store/*/*/shard-*.jsonl"))
            for line in path.read_text().splitlines()]


def token_ids(output) -> dict[str, list[int]]:
    rows = [json.loads(line) for line in (output / "samples/tiny-qwen3/gsm8k.jsonl").read_text().splitlines()]
    return {row["doc_id"]: row["token_ids"] for row in rows}


@pytest.mark.parametrize("schedule, inject, retried", [
    # static: call 1 is the warm-up sample, call 2 the batch of 4 that runs out of memory; its 4 requests are
    # retried as two batches of 2
    ("static", 2, [2, 2, 2, 2]),
    # rows in flight: call 1 is the warm-up, calls 2... are the stream's rounds; the third call fails mid-stream
    # and the 4 requests in flight are retried in a stream of 2 rows
    ("continuous", 3, [2, 2, 2, 2]),
])
def test_out_of_memory_halves_the_rows_and_retries_what_was_in_flight(monkeypatch, capsys, tmp_path, schedule,
                                                                       inject, retried):
    reference = tmp_path / "reference"
    assert run(capsys, reference, "--batch-size", "1")[0] == 0

    monkeypatch.setenv(INJECT_OOM_ENV, str(inject))
    output = tmp_path / "run"
    status, out, err = run(capsys, output, "--batch-size", "4", "--schedule", schedule)
    assert status == 0, err
    assert f"out of memory at 4 rows (out of memory injected by {INJECT_OOM_ENV}={inject}" in out
    assert "retrying the requests in flight at 2" in out
    lines = store_lines(output)
    assert len(lines) == len({r["key"] for r in lines}) == ITEMS  # the finished warm-up kept, nothing doubled
    assert [r["batch_size"] for r in lines] == [1, *retried]
    result = json.loads((output / "results.json").read_text())["results"][0]
    assert result["manifest"]["batch_size"] == 4 and result["manifest"]["batch_size_settled"] == 2
    assert "4→2 (out of memory)" in out  # the summary table
    assert token_ids(output) == token_ids(reference)  # greedy: the retried rows decode as a single row would


def test_one_row_out_of_memory_is_one_line_and_keeps_what_finished(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv(INJECT_OOM_ENV, "3")
    output = tmp_path / "run"
    status, out, err = run(capsys, output, "--batch-size", "1", "--schedule", "static")
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "out of memory decoding a single request" in err and "rerun the same command to resume" in err
    assert len(store_lines(output)) == 2  # the two calls before the third are stored

    monkeypatch.delenv(INJECT_OOM_ENV)
    assert run(capsys, output, "--batch-size", "1", "--schedule", "static")[0] == 0
    assert len({r["key"] for r in store_lines(output)}) == len(store_lines(output)) == ITEMS


def test_the_hook_counts_calls_and_refuses_a_bad_value(monkeypatch):
    monkeypatch.setenv(INJECT_OOM_ENV, "2")
    calls = DecodeCalls.from_env()
    calls.tick()
    with pytest.raises(torch.OutOfMemoryError):
        calls.tick()
    calls.tick()  # only the K-th call fails: its retry runs
    assert list(DecodeCalls(inject_at=None).counted(iter("abc"))) == ["a", "b", "c"]
    with pytest.raises(torch.OutOfMemoryError):
        list(DecodeCalls(inject_at=3).counted(iter("abc")))
    monkeypatch.setenv(INJECT_OOM_ENV, "two")
    with pytest.raises(RunError, match=INJECT_OOM_ENV):
        DecodeCalls.from_env()
    monkeypatch.delenv(INJECT_OOM_ENV)
    assert DecodeCalls.from_env().inject_at is None


def test_budget_halves_what_failed_down_to_one_row():
    budget = RowBudget(8)
    budget.halve(8, MemoryError(), "m")
    assert budget.rows == 4 and budget.reduced
    budget.halve(3, MemoryError(), "m")  # a short last batch of 3 failed: 1 row next
    assert budget.rows == 1
    with pytest.raises(OutOfMemoryAtOneRow):
        budget.halve(1, MemoryError(), "m")
