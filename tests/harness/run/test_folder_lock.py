"""One writer per run folder, with real processes: a second run exits 2 naming the holder, ``--wait`` waits for it,
and the lock of a killed run is taken over (with a notice), even while a process it started still holds the file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.run.lock import LOCK_NAME, FolderInUse, Holder, hold_run_folder

REPO = Path(__file__).resolve().parents[3]
COMMAND = ["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "2", "--gen-length", "8",
           "--no-progress"]
# A process that takes the run folder's lock and keeps it until its stdin closes (or it is killed); with "fork" a
# child it starts inherits the locked file and outlives it. It prints "held" and its child's pid (0: none).
HOLDER = """
import os, sys, time
from pathlib import Path
from harness.run.lock import hold_run_folder
with hold_run_folder(Path(sys.argv[1])):
    child = os.fork() if sys.argv[2:] == ["fork"] else 0
    if sys.argv[2:] == ["fork"] and child == 0:
        time.sleep(600)
        os._exit(0)
    print("held", child, flush=True)
    sys.stdin.readline()
"""


def hold(folder: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """The holding process and its child's pid (0 without one)."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), *extra], cwd=REPO, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    word, child = process.stdout.readline().split()
    assert word == "held"
    return process, int(child)


def holder_of(folder: Path) -> Holder:
    return Holder.parse((folder / LOCK_NAME).read_text())


def run(capsys, output: Path, *extra: str) -> tuple[int, str, str]:
    status = main([*COMMAND, "--output", str(output), *extra])
    out = capsys.readouterr()
    return status, out.out, out.err


def store_lines(output: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(output.glob("store/*/*/shard-*.jsonl"))
            for line in path.read_text().splitlines()]


def test_a_second_run_exits_2_naming_the_holder(capsys, tmp_path):
    output = tmp_path / "run"
    holder, _ = hold(output)
    try:
        held_by = holder_of(output)
        assert held_by.pid == holder.pid
        status, _, err = run(capsys, output)
        assert status == 2
        line = err.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line
        assert f"pid {holder.pid} (started {held_by.started})" in line and "--wait" in line and str(output) in line
        assert not store_lines(output)  # it wrote nothing
        assert holder_of(output).pid == holder.pid  # and left the holder's lock as it was
    finally:
        holder.stdin.close()
        holder.wait()
    assert not (output / LOCK_NAME).exists()  # released: the file goes with it


def test_wait_runs_once_the_holder_is_done(capsys, tmp_path):
    output = tmp_path / "run"
    holder, _ = hold(output)
    released_at: list[float] = []

    def release_later():
        time.sleep(1.5)
        released_at.append(time.monotonic())
        holder.stdin.close()
        holder.wait()

    thread = threading.Thread(target=release_later)
    thread.start()
    try:
        status, out, err = run(capsys, output, "--wait")
    finally:
        thread.join()
    assert status == 0, err
    assert f"is in use by pid {holder.pid}" in out and "waiting for it to finish" in out
    assert released_at and len(store_lines(output)) == 2
    assert "took over" not in out  # the holder removed its file: nothing left to take over


def test_the_lock_of_a_killed_run_is_taken_over(capsys, tmp_path):
    output = tmp_path / "run"
    holder, _ = hold(output)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert holder_of(output).pid == holder.pid  # the killed run left its file
    status, out, err = run(capsys, output)
    assert status == 0, err
    assert f"took over the run lock left by pid {holder.pid}" in out and "no longer running" in out
    assert len(store_lines(output)) == 2 and not (output / LOCK_NAME).exists()


def test_a_dead_holder_s_child_still_holding_the_file_does_not_block(tmp_path):
    output = tmp_path / "run"
    holder, child = hold(output, "fork")
    assert child > 0
    try:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        notes: list[str] = []
        with pytest.raises(FolderInUse):  # a live holder is still refused, however it holds the file
            with hold_run_folder(tmp_path / "other"), hold_run_folder(tmp_path / "other"):
                pass
        with hold_run_folder(output, note=notes.append) as me:
            assert me.pid == os.getpid() and holder_of(output).pid == os.getpid()
        assert len(notes) == 1 and f"pid {holder.pid}" in notes[0] and "no longer running" in notes[0]
    finally:
        os.kill(child, signal.SIGKILL)



def test_a_launch_takes_the_lock_once_on_rank_0(tmp_path):
    from harness.cli import one_writer
    from harness.run.ranks import DistContext

    output = tmp_path / "run"
    holder, _ = hold(output)
    try:
        with one_writer(output, DistContext(rank=1, world_size=2), wait=False):  # rank 1 leaves it to rank 0
            assert holder_of(output).pid == holder.pid
        with pytest.raises(FolderInUse):
            with one_writer(output, DistContext(rank=0, world_size=2), wait=False):
                pass
    finally:
        holder.stdin.close()
        holder.wait()


@pytest.mark.slow
def test_two_runs_of_one_command_store_each_sample_once(tmp_path):
    """The issue's case: the same command started twice on one folder, the second 2 s after the first (long
    canvases keep the first generating while the second starts); the second exits 2, the first finishes alone."""
    output = tmp_path / "run"
    command = [sys.executable, "run_eval.py", *COMMAND, "--limit", "5", "--gen-length", "512", "--output",
               str(output)]
    first = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert first.wait(timeout=600) == 0, first.stderr.read()
    assert second.returncode == 2, second.stdout
    assert f"in use by pid {first.pid}" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    keys = [r["key"] for r in store_lines(output)]
    assert len(keys) == len(set(keys)) == 5
