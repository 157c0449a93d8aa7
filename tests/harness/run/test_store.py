"""The resume store (durable appends, torn last lines, duplicates across shards) and the run folder's files."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import replace

import pytest

from harness.files import JSONLError, read_jsonl, write_atomic
from harness.run.folder import RunFolder, RunLoadError, load_run
from harness.run.records import ResultEntry, ResultsFile
from harness.run.store import SampleStore, sample_key
from run_folders import stored


def test_keys_depend_on_every_part_and_not_on_order():
    base = dict(model={"name": "m"}, decoding={"slot_size": 8}, task="gsm8k", doc="3", seed=1)
    assert sample_key(**base) == sample_key(**dict(reversed(list(base.items()))))
    for part, other in [("model", {"name": "n"}), ("decoding", {"slot_size": 16}), ("doc", "4"), ("seed", 2)]:
        assert sample_key(**{**base, part: other}) != sample_key(**base)


def test_append_load_and_torn_tail(tmp_path):
    store = SampleStore(tmp_path / "s", shard="rank0")
    store.append([stored("a"), stored("b")])
    with store.shard_path.open("a") as handle:
        handle.write('{"key": "c", "text": "3"')  # a writer killed mid-line
    assert set(store.load()) == {"a", "b"}
    store.append([stored("c", "4")])
    lines = store.shard_path.read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["a", "b", "c"]
    assert store.load()["c"] == stored("c", "4")


def test_shards_merge_without_duplicates(tmp_path):
    SampleStore(tmp_path, shard="rank0").append([stored("a"), stored("b")])
    SampleStore(tmp_path, shard="rank1").append([stored("b"), stored("c")])
    merged = SampleStore(tmp_path, shard="rank0").load()
    assert sorted(merged) == ["a", "b", "c"]


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_run_folder_files_follow_the_umask(tmp_path, mask, mode):
    """Atomic writes go through a private temporary file; the result must still be as shareable as a plain write."""
    folder = RunFolder(tmp_path / "run")
    with umask(mask):
        results = folder.write_results(ResultsFile({}, ()))
        samples = folder.write_samples("org/model", "gsm8k", [replace(stored("0"), scores={})])
        write_atomic(tmp_path / "plain.txt", "x")
    for path in (results, samples, tmp_path / "plain.txt"):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # no temporary file left behind


def test_run_folder_layout_is_read_back_as_written(tmp_path):
    folder = RunFolder(tmp_path / "run")
    result = {"model": "org/model", "task": "gsm8k", "manifest": {}, "n_samples": 1, "primary_metric": "m",
              "metrics": {}, "speed": {}, "diagnostics": {}}
    folder.write_results(ResultsFile.of({"seed": 1}, [ResultEntry.from_json(result)]))
    scored = replace(stored("0"), scores={"m": 1.0})
    folder.write_samples("org/model", "gsm8k", [scored])
    assert folder.samples_path("org/model", "gsm8k") == tmp_path / "run" / "samples" / "org_model" / "gsm8k.jsonl"
    shard = folder.store("org/model", "gsm8k", rank=2).shard_path
    assert shard == tmp_path / "run" / "store" / "org_model" / "gsm8k" / "shard-rank2.jsonl"
    for path in (tmp_path / "run", tmp_path / "run" / "results.json"):
        run = load_run(path)
        assert run.name == "run" and run.manifest == {"seed": 1} and run.results == (ResultEntry.from_json(result),)
        assert run.samples("org/model", "gsm8k") == [scored]
    (tmp_path / "run" / "results.json").rename(tmp_path / "run" / "baseline.json")
    assert load_run(tmp_path / "run" / "baseline.json").name == "baseline"
    with pytest.raises(RunLoadError, match="folder without results.json"):
        load_run(tmp_path / "run")


def test_jsonl_reader_names_the_bad_line_unless_tolerant(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n{broken\n{"a": 3}\n{"a": 4')
    with pytest.raises(JSONLError, match=r"x.jsonl:3: not valid JSON"):
        list(read_jsonl(path))
    assert list(read_jsonl(path, tolerant=True)) == [(1, {"a": 1}), (4, {"a": 3})]  # torn tail and bad line dropped


def test_jsonl_reader_names_a_line_that_is_not_utf8_in_both_modes(tmp_path):
    """Damage on a complete line is never skipped, even by the tolerant reader; a torn tail inside a character is."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n{"a": 3}\n')
    for tolerant in (False, True):
        with pytest.raises(JSONLError, match=r"x.jsonl:2: not UTF-8 text"):
            list(read_jsonl(path, tolerant=tolerant))
    path.write_bytes(b'{"a": 1}\n' + '{"a": "\u00e9'.encode()[:-1])
    assert list(read_jsonl(path, tolerant=True)) == [(1, {"a": 1})]
