"""A new user's first hour: a run that fails leaves no folder, conflicting options end in one line, the thread
count is chosen and recorded, offline is found once, the smoke preset is quick and says so, and a resumed run says
what it skipped."""

from __future__ import annotations

import json

import pytest
import torch

import tasks.records as records
from harness.cli import build_parser, main, settings_from_args
from harness.run.folder import removed_if_left_empty
from harness.run.presets import SMOKE_CANVAS
from harness.run.runner import Runner, RunSettings
from harness.run.threads import CPU_AUTO_THREADS, resolve_threads
from tasks.records import LoadedData

MODEL = "tiny-llada"


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def run_argv(output, *extra: str) -> list[str]:
    return ["--models", MODEL, "--tasks", "gsm8k", "--data", "fixtures", "--limit", "2", "--gen-length", "8",
            "--no-progress", "--output", str(output), *extra]


@pytest.mark.parametrize("extra, says", [
    (["--model-arg", f"{MODEL}.steps_typo=4"], "steps_typo"),                    # a bad option
    (["--models", "tiny-refusion"], "gen_length=8"),                             # a canvas ReFusion cannot tile
    (["--models", "hf:/nonexistent"], "/nonexistent"),                           # a checkpoint that is not there
    (["--data", "hub"], "--data fixtures"),                                      # offline, hub data asked for
])
def test_a_run_that_fails_at_planning_leaves_no_folder(capsys, tmp_path, extra, says):
    output = tmp_path / "runs" / "first"
    assert says in one_line_error(capsys, run_argv(output, *extra))
    assert not (tmp_path / "runs").exists()


def test_a_failed_run_keeps_a_folder_that_existed_or_holds_files(tmp_path):
    kept, stored = tmp_path / "kept", tmp_path / "new" / "run"
    kept.mkdir()
    for folder, write in ((kept, False), (stored, True)):
        with pytest.raises(RuntimeError), removed_if_left_empty(folder):
            folder.mkdir(parents=True, exist_ok=True)
            if write:
                (folder / "store.jsonl").write_text("{}\n")
            raise RuntimeError("failed")
    assert kept.is_dir() and (stored / "store.jsonl").is_file()


@pytest.mark.parametrize("data", ["fixtures", "hub"])
def test_data_dir_beside_an_explicit_source_is_one_line(capsys, tmp_path, data):
    err = one_line_error(capsys, run_argv(tmp_path / "run", "--data", data, "--data-dir", str(tmp_path)))
    assert f"--data {data}" in err and "--data-dir" in err and "give only one" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["0", "many", "-2"])
def test_bad_thread_count_is_one_line(capsys, tmp_path, value):
    assert "--threads" in one_line_error(capsys, run_argv(tmp_path / "run", "--threads", value))


def test_auto_threads_follow_the_device_and_the_environment(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert resolve_threads("auto", torch.device("cpu")) == CPU_AUTO_THREADS
    assert resolve_threads("3", torch.device("cpu")) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert resolve_threads("auto", torch.device("cpu")) == 2


def test_help_documents_bare_model_args_and_threads():
    text = " ".join(build_parser().format_help().split())
    assert "a bare KEY=VALUE for every model of the run" in text and "--threads" in text and "smoke" in text


def test_offline_is_found_once_and_named_in_one_note(capsys, tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import constants

    for variable in records.OFFLINE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online as far as the clients know; restored after
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setattr(datasets.config, name, False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    tries = []

    def no_network(address, timeout):
        tries.append(address)
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(records.socket, "create_connection", no_network)
    records.unreachable.cache_clear()
    argv = ["--models", MODEL, "--tasks", "gsm8k,arc_challenge", "--gen-length", "8", "--no-progress",
            "--output", str(tmp_path / "run")]
    try:
        Runner(settings_from_args(build_parser().parse_args(argv))).plan_all()
    finally:
        records.unreachable.cache_clear()
    notes = [line for line in capsys.readouterr().out.splitlines() if "not reachable" in line]
    assert len(notes) == 1 and "gsm8k, arc_challenge" in notes[0] and "Network is unreachable" in notes[0]
    assert len(tries) == 1  # one probe for the whole run, no retries
    assert constants.HF_HUB_OFFLINE and datasets.config.HF_DATASETS_OFFLINE  # checkpoints load from the cache too


def test_smoke_preset_sets_a_small_canvas_and_says_so(capsys, tmp_path):
    argv = ["--models", f"{MODEL},tiny-refusion", "--tasks", "gsm8k", "--data", "fixtures", "--preset", "smoke",
            "--no-progress", "--output", str(tmp_path / "run")]
    jobs = Runner(settings_from_args(build_parser().parse_args(argv))).plan_all()
    assert {job.canvas for job in jobs} == {SMOKE_CANVAS}
    assert "--preset smoke" in capsys.readouterr().out
    jobs = Runner(settings_from_args(build_parser().parse_args([*argv, "--gen-length", "16"]))).plan_all()
    assert {job.canvas for job in jobs} == {16} and "--preset smoke" not in capsys.readouterr().out


def test_threads_are_recorded_and_resume_says_what_it_skipped(capsys, tmp_path):
    before = torch.get_num_threads()
    try:
        assert main(run_argv(tmp_path / "run", "--threads", "1")) == 0
        manifest = json.loads((tmp_path / "run" / "results.json").read_text())["manifest"]
        assert manifest["environment"]["torch_threads"] == 1 and manifest["settings"]["threads"] == 1
        capsys.readouterr()
        assert main(run_argv(tmp_path / "run", "--threads", "1")) == 0
        assert f"{MODEL} · gsm8k: 2 of 2 samples already stored, skipped" in capsys.readouterr().out
        resumed = [a for a in run_argv(tmp_path / "run", "--threads", "1", "--limit", "3") if a != "--no-progress"]
        assert main(resumed) == 0
        out, err = capsys.readouterr()
        assert "2 of 3 samples already stored, resuming with 1 left" in out
        assert "3/3" in err  # the bar counts the whole job, starting from what was stored
    finally:
        torch.set_num_threads(before)


class LMEvalStub:
    """An lm-eval task as the runner sees it: its own data, whatever --data-dir says."""

    name = "lmeval:stub"

    def load(self, source: str, data_dir) -> LoadedData:
        return LoadedData([], "lm-eval", "stub", "0")


def test_data_dir_beside_an_lmeval_task_is_noted(capsys, tmp_path):
    runner = Runner(RunSettings(models=(MODEL,), tasks=(), output=tmp_path / "run", data_dir=tmp_path))
    runner.load_all_data([LMEvalStub()])
    assert "--data-dir does not apply to lmeval:stub" in capsys.readouterr().out
