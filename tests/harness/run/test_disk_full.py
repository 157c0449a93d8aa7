"""A full disk (or quota, or a read-only file system) while a run writes ends in one line and exit status 3, and the
same command resumes once there is space: nothing lost, nothing doubled. The failures are injected where the run
writes (a torn line first, as a write cut short by the kernel leaves), since filling a real disk needs root."""

from __future__ import annotations

import errno
import json
import shutil

import pytest

import harness.run.folder as folder
from harness.cli import main
from harness.errors import DISK_FULL
from harness.run.space import disk_full_message, kept_samples
from harness.run.store import SampleStore
from run_folders import stored

ITEMS = 5
COMMAND = ["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--gen-length", "8", "--no-progress",
           "--schedule", "static"]


def store_lines(output) -> list[dict]:
    return [json.loads(line) for path in sorted(output.glob("store/*/*/shard-*.jsonl"))
            for line in path.read_text().splitlines()]


def run(capsys, output) -> tuple[int, str]:
    status = main([*COMMAND, "--output", str(output)])
    return status, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_full_disk_while_storing_ends_in_one_line_and_resumes(monkeypatch, capsys, tmp_path):
    output = tmp_path / "run"
    append, calls = SampleStore.append, []

    def fills_up(self, records):
        calls.append(1)
        if len(calls) == 3:  # the third batch: half a line reaches the disk, then the disk is full
            with self.shard_path.open("a", encoding="utf-8") as handle:
                handle.write('{"key": "torn", "prompt": "half a li')
            raise OSError(errno.ENOSPC, "No space left on device", str(self.shard_path))
        return append(self, records)

    monkeypatch.setattr(SampleStore, "append", fills_up)
    status, err = run(capsys, output)
    assert status == DISK_FULL == 3
    line = one_line(err)
    free = shutil.disk_usage(output).free
    assert str(output) in line and "the disk is full" in line and "No space left on device" in line
    reported = int(line.split(" has ")[1].split(" bytes free")[0].replace(",", ""))
    assert abs(reported - free) < 1 << 26  # what shutil.disk_usage says, give or take what others wrote since
    assert "keeps 2 finished samples" in line and "rerun the same command to resume" in line
    assert not (output / "run.lock").exists() and not (output / "results.json").exists()

    monkeypatch.setattr(SampleStore, "append", append)
    status, err = run(capsys, output)
    assert status == 0, err
    keys = [r["key"] for r in store_lines(output)]
    assert len(keys) == len(set(keys)) == ITEMS  # the torn line repaired, nothing lost or doubled
    assert json.loads((output / "results.json").read_text())["results"][0]["n_samples"] == ITEMS


@pytest.mark.parametrize("code, words", [(errno.EDQUOT, "the disk quota is used up"),
                                         (errno.EROFS, "the file system is read-only")])
def test_quota_or_read_only_writing_results_is_the_same_line(monkeypatch, capsys, tmp_path, code, words):
    output = tmp_path / "run"

    def refused(path, records):
        raise OSError(code, "refused", str(path))

    monkeypatch.setattr(folder, "write_jsonl_atomic", refused)  # the samples file, the first whole-file write
    status, err = run(capsys, output)
    line = one_line(err)
    assert status == DISK_FULL and words in line and f"keeps {ITEMS} finished samples" in line
    assert str(output / "samples") in line


def test_full_disk_writing_the_report_ends_the_run_too(monkeypatch, capsys, tmp_path):
    import reports.html

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reports.html, "write_report", full)
    status, err = run(capsys, tmp_path / "run")
    assert status == DISK_FULL and "the disk is full" in one_line(err)


def test_another_os_error_is_not_called_a_full_disk(monkeypatch, capsys, tmp_path):
    def broken(self, records):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(SampleStore, "append", broken)
    with pytest.raises(OSError):
        main([*COMMAND, "--output", str(tmp_path / "run")])


def test_the_message_counts_every_store_once(tmp_path):
    for model, task, keys in (("m", "t", "abc"), ("m", "u", "de")):
        for shard, key in enumerate(keys):
            SampleStore(tmp_path / "store" / model / task, shard=str(shard % 2)).append([stored(key)])
    SampleStore(tmp_path / "store" / "m" / "t", shard="1").append([stored("a")])  # a duplicate across shards
    assert kept_samples([tmp_path / "store"]) == 5
    message = disk_full_message(OSError(errno.ENOSPC, "No space left on device", "x.jsonl"), tmp_path / "missing",
                                [tmp_path / "store"])
    assert message.startswith("cannot write x.jsonl: the disk is full") and "keeps 5 finished samples" in message
    assert f"{tmp_path / 'missing'} has " in message and " bytes free" in message

