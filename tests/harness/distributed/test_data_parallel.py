"""Data-parallel runs on CPU (gloo): 1 and 2 processes agree; a killed rank loses nothing that was finished."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]
ARGS = ["run_eval.py", "--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--no-progress"]


def torchrun(n: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n)]


def accelerate_launch(n: int) -> list[str]:
    # --multi_gpu picks accelerate's torch.distributed launcher; on a machine without GPUs the ranks use gloo.
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(n),
            "--main_process_port", str(free_port())]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(command: list[str], output: Path, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run([*command, *ARGS, "--output", str(output), *extra], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def samples(output: Path) -> list[dict]:
    path = output / "samples" / "tiny-qwen3" / "gsm8k.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def store_keys(output: Path) -> list[str]:
    return [json.loads(line)["key"] for path in output.glob("store/*/*/shard-*.jsonl")
            for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [torchrun, accelerate_launch])
def test_one_and_two_processes_agree(tmp_path, launcher):
    run([sys.executable], tmp_path / "one", "--gen-length", "24")
    run(launcher(2), tmp_path / "two", "--gen-length", "24")
    one, two = samples(tmp_path / "one"), samples(tmp_path / "two")
    assert [s["doc_id"] for s in one] == [s["doc_id"] for s in two]
    for a, b in zip(one, two):
        assert (a["key"], a["token_ids"], a["text"], a["scores"]) == (b["key"], b["token_ids"], b["text"], b["scores"])
    assert {s["rank"] for s in two} == {0, 1}
    assert len(list((tmp_path / "two").glob("store/*/*/shard-*.jsonl"))) == 2
    result_one = json.loads((tmp_path / "one" / "results.json").read_text())["results"][0]
    result_two = json.loads((tmp_path / "two" / "results.json").read_text())["results"][0]
    assert result_one["metrics"] == result_two["metrics"]
    speed = result_two["speed"]
    assert set(speed["per_rank_tokens_per_second"]) == {"0", "1"}
    assert speed["combined_tokens_per_second"] == sum(speed["per_rank_tokens_per_second"].values())


def rank_process(launcher: psutil.Process, rank: int) -> psutil.Process | None:
    for child in launcher.children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank):
                return child
        except psutil.Error:
            continue
    return None


@pytest.mark.slow
def test_killed_rank_then_rerun_with_another_process_count(tmp_path):
    output = tmp_path / "run"
    launcher = subprocess.Popen([*torchrun(2), *ARGS, "--output", str(output), "--gen-length", "160"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rank1_shard = output / "store" / "tiny-qwen3" / "gsm8k" / "shard-rank1.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (rank1_shard.exists() and rank1_shard.read_text().count("\n") >= 1):
        time.sleep(0.02)
    victim = rank_process(psutil.Process(launcher.pid), 1)
    assert victim is not None, "rank 1 finished before it could be killed"
    victim.send_signal(signal.SIGKILL)
    log, _ = launcher.communicate(timeout=300)
    assert launcher.returncode != 0
    assert "rank: 1" in log or "rank 1" in log  # the launcher names the rank that died
    finished = set(store_keys(output))
    assert 1 <= len(finished) < 5

    run([sys.executable], output, "--gen-length", "160")  # resume with one process instead of two
    keys = store_keys(output)
    assert len(keys) == len(set(keys)) == 5
    assert finished <= set(keys)
    assert len(samples(output)) == 5
