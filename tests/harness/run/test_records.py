"""The typed records read what the current release stores, key for key, and tolerate older and newer files."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.run.folder import RunFolder, RunLoadError, load_run
from harness.run.records import RecordError, ResultEntry, ResultsFile, SampleRecord
from harness.run.store import SampleStore
from run_folders import stored

# A scored continuous-schedule line as the current release writes it (an engine's own fields among the generation's).
CURRENT_SAMPLE = {
    "key": "k", "doc_id": "7", "prompt": "p", "text": "42", "raw_text": "42<eos>", "token_ids": [5, 6],
    "gen_tokens": 2, "gen_tokens_after_stop": 2, "canvas_tokens": 32, "nfe": 2.0, "hit_max_tokens": False,
    "forwards": 2, "latency_s": 0.3, "forward_s": 0.2, "batch_latency_s": None, "batch_size": 4,
    "schedule": "continuous", "warmup": False, "rank": 0, "queue_s": 0.1, "phase": "1a", "phase_elapsed_s": 0.5,
    "group": None, "target": "42", "extracted": {"flexible-extract": "42"}, "scores": {"m": 1.0},
    "diagnostics": {"empty": False},
}
ENGINE_FIELDS = {"request_latency_s": 0.4, "prompt_ids_match": True}
# A store line written before rows counted their forwards, times inside forwards were measured, or schedules existed.
OLD_STORE_LINE = {key: CURRENT_SAMPLE[key] for key in (
    "key", "doc_id", "prompt", "text", "raw_text", "token_ids", "gen_tokens", "gen_tokens_after_stop",
    "canvas_tokens", "nfe", "hit_max_tokens", "latency_s")} | {"batch_latency_s": 0.3, "batch_size": 1,
                                                             "warmup": True}


def test_a_current_sample_line_comes_back_unchanged():
    line = {**CURRENT_SAMPLE, **ENGINE_FIELDS}
    record = SampleRecord.from_json(line)
    assert record.extra == ENGINE_FIELDS and record.schedule == "continuous" and record.scored
    assert record.to_json() == line
    static = {k: v for k, v in CURRENT_SAMPLE.items() if k not in ("queue_s", "phase", "phase_elapsed_s")}
    assert list(SampleRecord.from_json(static).to_json()) == list(static)  # same keys, same order


def test_an_old_store_line_takes_the_defaults_and_resumes(tmp_path):
    store = SampleStore(tmp_path / "s", shard="rank0")
    store.folder.mkdir(parents=True)
    store.shard_path.write_text(json.dumps(OLD_STORE_LINE) + "\n")
    (record,) = store.load().values()
    assert (record.rank, record.forwards, record.forward_s, record.schedule) == (0, None, None, "static")
    assert not record.scored and "scores" not in record.to_json()


def test_a_line_without_a_required_key_is_regenerated_in_the_store_and_refused_in_a_samples_file(tmp_path):
    broken = {k: v for k, v in CURRENT_SAMPLE.items() if k != "token_ids"}
    with pytest.raises(RecordError, match="token_ids"):
        SampleRecord.from_json(broken)
    store = SampleStore(tmp_path / "s", shard="rank0")
    store.append([stored("a")])
    with store.shard_path.open("a") as handle:
        handle.write(json.dumps(broken) + "\n")
    assert set(store.load()) == {"a"}
    folder = RunFolder(tmp_path / "run")
    folder.write_samples("m", "t", [SampleRecord.from_json(CURRENT_SAMPLE), stored("b")])  # the second unscored
    with pytest.raises(RunLoadError, match="line 2 is not a scored sample record"):
        folder.read_samples("m", "t")


def test_results_round_trip_and_older_files_load(tmp_path):
    entry = {"model": "m", "task": "t", "manifest": {"model": {"kind": "ar"}}, "n_samples": 1, "primary_metric": "x",
             "metrics": {"x": {"value": 1.0}}, "groups": {}, "speed": {}, "diagnostics": {}, "later_field": 1}
    current = {"manifest": {"seed": 1}, "results": [entry], "attribution": [{"model": "m"}]}
    loaded = ResultsFile.from_json(current)
    assert loaded.to_json() == current and list(loaded.results[0].to_json()) == list(entry)
    assert loaded.results[0].primary == {"value": 1.0} and loaded.results[0].kind == "ar"
    before_groups = {k: v for k, v in entry.items() if k != "groups"}
    (tmp_path / "results.json").write_text(json.dumps({"manifest": {}, "results": [before_groups]}))
    run = load_run(tmp_path)
    assert run.results[0].groups == {} and run.attribution == ()
    (tmp_path / "results.json").write_text(json.dumps({"results": [{"model": "m"}]}))
    with pytest.raises(RunLoadError, match="result 0 lacks task, manifest"):
        load_run(tmp_path)


def test_the_results_file_attributes_speed_once_when_written():
    def result(model: str, kind: str, seconds: float) -> ResultEntry:
        return ResultEntry(model, "t", {"model": {"kind": kind}}, 1, "x", {}, speed={
            "per_token": {"seconds": seconds, "forwards": 1.0, "forward_seconds": None}}, diagnostics={})

    written = ResultsFile.of({}, [result("ar", "ar", 0.2), result("fast", "llada", 0.1)])
    assert [(a["model"], a["baseline"], a["speed_ratio"]) for a in written.attribution] == [("fast", "ar", 2.0)]
    assert replace(written, attribution=()).to_json()["attribution"] == []
