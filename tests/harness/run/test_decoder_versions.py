"""Decoder versions in sample keys: version 1 keeps the keys stores were written with, a new version regenerates
what an older one stored (saying so), ``--reuse-stale`` keeps it and the manifest and report say so."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from harness.cli import main
from harness.run.runner import plan
from harness.run.store import sample_key, versioned_key
from harness.run.versions import StaleSamples, find_stale, other_versions, stale_message
from models.options import record as decoding_record
from models.registry import load_adapter, spec_for
from tasks.registry import make_task


def tiny_qwen3():
    return load_adapter(spec_for("tiny-qwen3"), torch.device("cpu"), torch.float32)


def with_version(monkeypatch, adapter, version: int) -> None:
    """Every adapter of this class (the runner loads its own) runs the same decoder at another version."""
    monkeypatch.setattr(type(adapter), "decoder", dataclasses.replace(type(adapter).decoder, version=version))


def planned(adapter, batch_size: int = 1):
    task = make_task("gsm8k")
    docs = task.docs(task.load("fixtures", None).records)[:3]
    config = adapter.make_config({}, 8, 1234)
    return task, docs, decoding_record(config), plan(task, docs, adapter, decoding_record(config), 8, 1234,
                                                     batch_size)


def test_version_one_keys_are_the_keys_stores_were_written_with():
    adapter = tiny_qwen3()
    assert adapter.decoder.version == 1
    task, docs, decoding, samples = planned(adapter)
    # the key as the runner computed it before decoders had versions, part for part
    before = [sample_key(model=adapter.identity(), decoding=decoding, task=task.name, task_version=task.version,
                         doc=doc.id, prompt=dataclasses.asdict(task.prompt(doc)), canvas=8, seed=1234,
                         batch_size=1) for doc in docs]
    assert [p.key for p in samples] == [p.base_key for p in samples] == before


def test_another_version_changes_every_key_and_finds_the_old_ones(monkeypatch):
    adapter = tiny_qwen3()
    _, _, _, v1 = planned(adapter)
    with_version(monkeypatch, adapter, 3)
    _, _, _, v3 = planned(adapter)
    assert [p.base_key for p in v3] == [p.base_key for p in v1]
    assert not {p.key for p in v3} & {p.key for p in v1}
    assert [p.key for p in v3] == [versioned_key(p.base_key, 3) for p in v1]
    stored = {v1[0].key: "v1 sample", versioned_key(v1[1].base_key, 2): "v2 sample", v3[2].key: "v3 sample"}
    stale = find_stale(v3, stored, 3)
    assert stale.found == {v3[0].key: (1, v1[0].key), v3[1].key: (2, versioned_key(v1[1].base_key, 2))}
    assert stale.counts() == {2: 1, 1: 1} and stale.manifest() == {"v2": 1, "v1": 1}
    assert other_versions(3)[:3] == [2, 1, 4]


def test_stale_message_is_the_issue_s_line():
    stale = StaleSamples({f"k{i}": (3, f"old{i}") for i in range(412)})
    assert stale_message(stale, "refusion", 4, "regenerating") == \
        "412 stored samples of refusion decoder v3; this is v4: regenerating"
    both = StaleSamples({"a": (3, "x"), "b": (2, "y"), "c": (3, "z")})
    assert stale_message(both, "refusion", 4, "kept") == \
        "2 stored samples of refusion decoder v3 and 1 of v2; this is v4: kept"


def store_lines(output) -> list[dict]:
    return [json.loads(line) for path in sorted(output.glob("store/*/*/shard-*.jsonl"))
            for line in path.read_text().splitlines()]


def run(capsys, output, *extra: str) -> tuple[str, dict]:
    status = main(["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "3",
                   "--gen-length", "8", "--no-progress", "--output", str(output), *extra])
    out = capsys.readouterr()
    assert status == 0, out.err
    return out.out, json.loads((output / "results.json").read_text())["results"][0]


def test_a_new_version_regenerates_and_reuse_stale_keeps(monkeypatch, capsys, tmp_path):
    output = tmp_path / "run"
    adapter = tiny_qwen3()
    _, first = run(capsys, output)
    assert first["manifest"]["decoder"] == {"name": "ar", "version": 1} and "reused_stale" not in first["manifest"]
    v1_keys = {r["key"] for r in store_lines(output)}
    assert len(v1_keys) == 3

    with_version(monkeypatch, adapter, 2)
    out, second = run(capsys, output)
    assert "3 stored samples of ar decoder v1; this is v2: regenerating" in out
    lines = store_lines(output)
    assert len(lines) == 6 and len({r["key"] for r in lines} - v1_keys) == 3  # three new samples, none doubled
    scored = [json.loads(line) for line in (output / "samples/tiny-qwen3/gsm8k.jsonl").read_text().splitlines()]
    assert not {r["key"] for r in scored} & v1_keys  # the results hold version-2 samples only
    assert second["manifest"]["decoder"]["version"] == 2 and "reused_stale" not in second["manifest"]

    run(capsys, output)  # the same version again: nothing stale, nothing generated
    assert len(store_lines(output)) == 6

    with_version(monkeypatch, adapter, 3)
    out, third = run(capsys, output, "--reuse-stale")
    # the newest other version stands in (v1's copies are older still)
    assert "3 stored samples of ar decoder v2; this is v3: kept (--reuse-stale" in out
    assert len(store_lines(output)) == 6  # nothing generated
    assert third["manifest"]["reused_stale"] == {"v2": 3} and third["n_samples"] == 3
    assert third["manifest"]["decoder"]["version"] == 3
    manifests = (output / "report_manifests.csv").read_text()
    assert "reused_stale" in manifests.splitlines()[0] and '{""v2"": 3}' in manifests


@pytest.mark.parametrize("version", [2, 5])
def test_rescore_says_what_it_leaves_out(monkeypatch, capsys, tmp_path, version):
    output = tmp_path / "run"
    adapter = tiny_qwen3()
    run(capsys, output)
    with_version(monkeypatch, adapter, version)
    status = main(["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "3",
                   "--gen-length", "8", "--no-progress", "--output", str(output), "--rescore"])
    out = capsys.readouterr().out
    assert status == 0
    assert f"3 stored samples of ar decoder v1; this is v{version}: not scored (rerun without --rescore" in out
