"""The resume store: durable appends, torn last lines, duplicates across shards."""

from __future__ import annotations

import json

from harness.store import SampleStore, sample_key


def test_keys_depend_on_every_part_and_not_on_order():
    base = dict(model={"name": "m"}, decoding={"slot_size": 8}, task="gsm8k", doc="3", seed=1)
    assert sample_key(**base) == sample_key(**dict(reversed(list(base.items()))))
    for part, other in [("model", {"name": "n"}), ("decoding", {"slot_size": 16}), ("doc", "4"), ("seed", 2)]:
        assert sample_key(**{**base, part: other}) != sample_key(**base)


def test_append_load_and_torn_tail(tmp_path):
    store = SampleStore(tmp_path / "s", shard="rank0")
    store.append([{"key": "a", "v": 1}, {"key": "b", "v": 2}])
    with store.shard_path.open("a") as handle:
        handle.write('{"key": "c", "v": 3')  # a writer killed mid-line
    assert set(store.load()) == {"a", "b"}
    store.append([{"key": "c", "v": 4}])
    lines = store.shard_path.read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["a", "b", "c"]
    assert store.load()["c"]["v"] == 4


def test_shards_merge_without_duplicates(tmp_path):
    SampleStore(tmp_path, shard="rank0").append([{"key": "a", "v": 1}, {"key": "b", "v": 2}])
    SampleStore(tmp_path, shard="rank1").append([{"key": "b", "v": 2}, {"key": "c", "v": 3}])
    merged = SampleStore(tmp_path, shard="rank0").load()
    assert sorted(merged) == ["a", "b", "c"]
