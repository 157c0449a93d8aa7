"""Ranks stop when their launcher dies: SIGKILL on torchrun leaves no rank generating on its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.distributed.launcher_watch import parent_changed

REPO = Path(__file__).resolve().parents[3]
ARGS = ["run_eval.py", "--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--no-progress",
        "--gen-length", "400"]


def alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ranks_of(launcher: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in launcher.children(recursive=True):
        try:
            if "RANK" in child.environ():
                found.append(child)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_sigkilled_launcher_leaves_no_rank_alive(tmp_path):
    output = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *ARGS,
               "--output", str(output)]
    launcher = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks: list[psutil.Process] = []
    try:
        shards = output / "store" / "tiny-qwen3" / "gsm8k"
        deadline = time.time() + 300
        while time.time() < deadline and not any(p.stat().st_size for p in shards.glob("shard-*.jsonl")):
            assert launcher.poll() is None, "the run ended before its launcher could be killed"
            time.sleep(0.05)
        ranks = ranks_of(psutil.Process(launcher.pid))
        assert len(ranks) == 2, "both ranks should be generating"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(r) for r in ranks):
            time.sleep(0.1)
        assert not [r.pid for r in ranks if alive(r)], "a rank kept running without its launcher"
    finally:  # never leave a process behind, whatever failed
        for process in [r for r in ranks if alive(r)]:
            process.kill()
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_parent_checks():
    assert not parent_changed(os.getppid())
    assert parent_changed(-1)
    if sys.platform.startswith("linux"):
        child = subprocess.run([sys.executable, "-c", "from harness.distributed.launcher_watch import set_parent_death_signal;"
                                "print(set_parent_death_signal())"], cwd=REPO, capture_output=True, text=True)
        assert child.stdout.strip() == "True"
