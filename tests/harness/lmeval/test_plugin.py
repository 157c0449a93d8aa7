"""The lm-eval plugin as a user meets it: the installed ``.pth`` and plain ``lm_eval --model refusion``, in fresh
interpreters, since the hook acts at start-up and this test process has imported lm-eval already."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from harness.lmeval.model import SPEED_OUTPUT_ENV  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TASK = "gsm8k_cot_local"  # as in conftest.py
GEN_LENGTH = 16
PTH_NAME = "dllm_harness_lmeval.pth"


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != SPEED_OUTPUT_ENV}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=offline_env(), check=True)
    return done.stdout


def test_start_up_installs_only_the_hook():
    state = json.loads(run_python(
        "import json, sys; print(json.dumps({'lm_eval': any(m.startswith('lm_eval') for m in sys.modules),"
        " 'torch': 'torch' in sys.modules,"
        " 'finders': [getattr(f, '__name__', type(f).__name__) for f in sys.meta_path]}))"))  # classes or instances
    finders = state["finders"]
    assert "RegisterAfterRegistryImport" in finders, "reinstall the package: pip install --no-deps -e ."
    assert finders.index("RegisterAfterRegistryImport") < finders.index("PathFinder")  # asked before the file system
    assert not state["lm_eval"] and not state["torch"]


def test_lm_evals_registry_has_the_models_and_its_own():
    names = run_python(
        "from lm_eval.api.registry import get_model\n"
        "print(get_model('refusion').__name__, get_model('hf').__name__, get_model('dummy').__name__)\n"
        "import sys; print(any(type(f).__name__ == 'RegisterAfterRegistryImport' for f in sys.meta_path))")
    assert names.split() == ["RefusionLM", "HFLM", "DummyLM", "False"]  # the hook removes itself once it has run


@pytest.mark.slow
def test_plain_lm_eval_generates_like_the_harness(harness_run, read_samples, task_dir, tmp_path):
    """lm-eval's own console script, unpatched, with ``--model refusion``: the same generations as a harness run,
    and the speed files beside lm-eval's results."""
    harness = read_samples(harness_run("tiny-refusion"), "tiny-refusion")
    lm_eval_script = Path(sys.executable).with_name("lm_eval")
    assert lm_eval_script.exists(), "lm-eval's console script is installed with the package"
    command = [str(lm_eval_script), "--model", "refusion", "--model_args", "model=tiny-refusion", "--device", "cpu",
               "--tasks", TASK, "--include_path", str(task_dir), "--apply_chat_template", "--log_samples",
               "--gen_kwargs", f"max_gen_toks={GEN_LENGTH}", "--output_path", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, env=offline_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    folder = tmp_path / "tiny-refusion"
    (results,) = folder.glob("results_*.json")
    info = json.loads(results.read_text())["config"]["dllm_harness"]
    assert info["model"] == "tiny-refusion" and info["speed"][TASK]["canvas_tokens"] == GEN_LENGTH
    (speed,) = folder.glob("dllm_speed_2*.json")
    assert json.loads(speed.read_text())["speed"] == info["speed"]
    (samples,) = folder.glob(f"samples_{TASK}_*.jsonl")
    logged = {}
    for line in samples.read_text().splitlines():
        record = json.loads(line)
        logged[record["doc_id"]] = record
    assert len(harness) == len(logged) == 3
    for record in harness:
        assert logged[int(record["doc_id"])]["resps"][0][0] == record["text"]


def test_a_wheel_puts_the_pth_at_the_root_of_site_packages(tmp_path):
    """CI installs editable (checked above); a wheel must carry the same line at its root."""
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".*", "*.egg-info", "__pycache__", "runs", "build",
                                                                "tests", "benchmarks", "docs"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                    "build_meta.build_wheel(sys.argv[1])", str(wheels)],
                   cwd=source, check=True, capture_output=True, env=offline_env())
    (wheel,) = wheels.glob("dllm_harness-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        line = archive.read(PTH_NAME).decode()
        assert "harness/lmeval/plugin.py" in archive.namelist()
    assert line.startswith("import harness.lmeval.plugin;") and line.rstrip().endswith("install()")
    installed = next(Path(p) / PTH_NAME for p in sys.path if (Path(p) / PTH_NAME).exists())
    assert installed.read_text() == line  # the editable install wrote the same line
