"""A bad run fails before any model loads, with one line; default folders keep experiments apart."""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import models.adapters.causal as causal
import models.adapters.native as native
from harness.cli import build_parser, default_output, experiment_settings, main, settings_from_args


@pytest.fixture
def no_loading(monkeypatch):
    """Any weight load fails the test: planning must not need one."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model loaded during planning")

    monkeypatch.setattr(causal, "load_causal_lm", refuse)
    monkeypatch.setattr(native, "load_network", refuse)


def one_line(capsys, argv: list[str], status: int = 2) -> str:
    start = time.perf_counter()
    assert main(argv) == status
    assert time.perf_counter() - start < 30
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def argv(output, *extra: str) -> list[str]:
    return ["--models", "tiny-llada,tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "1",
            "--gen-length", "8", "--no-progress", "--output", str(output), *extra]


def test_output_that_is_a_file(capsys, tmp_path, no_loading):
    (tmp_path / "taken").write_text("x")
    assert "is a file" in one_line(capsys, argv(tmp_path / "taken"))
    assert "is a file" in one_line(capsys, argv(tmp_path / "taken" / "run"))


@contextmanager
def read_only_folder(folder: Path):
    """A folder the harness cannot write to: read-only permissions, or, for root (who writes through them), a
    read-only tmpfs mounted on it."""
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o500)
        try:
            yield folder
        finally:
            folder.chmod(0o700)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"root cannot mount a read-only tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_read_only_output_folder(capsys, tmp_path, no_loading):
    with read_only_folder(tmp_path / "ro") as folder:
        assert "not writable" in one_line(capsys, argv(folder))


def test_unknown_device(capsys, tmp_path, no_loading):
    assert "gpu" in one_line(capsys, argv(tmp_path / "run", "--device", "gpu"))


def test_duplicate_task_and_model(capsys, tmp_path):
    assert "gsm8k" in one_line(capsys, ["--models", "tiny-qwen3", "--tasks", "gsm8k,gsm8k", "--output",
                                        str(tmp_path / "run")])
    assert "tiny-qwen3" in one_line(capsys, ["--models", "tiny-qwen3,tiny-qwen3", "--tasks", "gsm8k", "--output",
                                             str(tmp_path / "run")])


def test_canvas_mismatch_of_a_later_model_fails_before_the_first_loads(capsys, tmp_path, no_loading):
    # a block length of 3 cannot tile tiny-llada's 8-token canvas; tiny-qwen3 comes first
    err = one_line(capsys, ["--models", "tiny-qwen3,tiny-llada", "--tasks", "gsm8k", "--data", "fixtures",
                            "--limit", "1", "--gen-length", "8", "--no-progress", "--output", str(tmp_path / "r"),
                            "--model-arg", "tiny-llada.block_length=3"])
    assert "tiny-llada" in err


def test_hub_data_offline_fails_before_loading(capsys, tmp_path, no_loading, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DLLM_HARNESS_CACHE", str(tmp_path / "cache"))
    one_line(capsys, argv(tmp_path / "run", "--data", "hub"))


def test_rescore_with_nothing_stored_exits_1(capsys, tmp_path, no_loading):
    assert "nothing is stored" in one_line(capsys, argv(tmp_path / "empty", "--rescore"), status=1)


def test_limit_above_the_data_is_noted(capsys, tmp_path):
    from harness.run.runner import Runner

    settings = settings_from_args(build_parser().parse_args(argv(tmp_path / "run", "--limit", "1000")))
    Runner(settings).plan_all()
    out = capsys.readouterr().out
    assert "--limit 1000 is more than" in out and out.count("--limit") == 1  # once per task, not per model


def test_default_folder_tells_experiments_apart(tmp_path):
    parse = build_parser().parse_args
    common = ["--models", "tiny-qwen3", "--tasks", "gsm8k"]
    fixtures = parse([*common, "--data", "fixtures"])
    local = parse([*common, "--data-dir", str(tmp_path)])
    batched = parse([*common, "--data", "fixtures", "--batch-size", "4"])
    limited = parse([*common, "--data", "fixtures", "--limit", "3"])
    folder = {name: default_output(("tiny-qwen3",), ("gsm8k",), experiment_settings(a))
              for name, a in [("fixtures", fixtures), ("local", local), ("batched", batched), ("limited", limited)]}
    assert folder["fixtures"] != folder["local"] != folder["batched"] != folder["fixtures"]
    assert folder["limited"] == folder["fixtures"]  # a rerun with another --limit resumes the same folder
    assert folder["fixtures"].name.startswith("tiny-qwen3__gsm8k__")
