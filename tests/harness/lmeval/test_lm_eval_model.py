"""lm-eval driving the harness's adapters: registered from the package's entry points, it renders and scores while
the adapter generates. On the same task the prompts, the generations and the speed fields equal a harness run's."""

from __future__ import annotations

import json
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from harness.lmeval.dllm_lm_eval import main  # noqa: E402
from harness.lmeval.model import (SPEED_OUTPUT_ENV, HarnessLM, HarnessLMError, RefusionLM,  # noqa: E402
                                  lm_eval_cli_output_folder, speed_folder)
from harness.lmeval.plugin import ENTRY_POINT_GROUP, register_models  # noqa: E402
from models.decoders.contract import ConfigError  # noqa: E402
from models.families import FAMILIES, LM_EVAL_ALIASES  # noqa: E402
from models.registry import ADAPTERS, MODELS  # noqa: E402

TASK = "gsm8k_cot_local"  # as in conftest.py
GEN_LENGTH = 16
NAMES = {"dllm-harness", *LM_EVAL_ALIASES}
PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def test_pyprojects_entry_points_are_the_declared_aliases():
    """The entry points are static text: they must name exactly the aliases the families declare, and each one's
    class, which harness.lmeval.model builds from the declaration."""
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
    expected = {"dllm-harness": "harness.lmeval.model:HarnessModelLM",
                **{a.name: f"harness.lmeval.model:{a.class_name}" for a in LM_EVAL_ALIASES.values()}}
    assert declared == expected


def test_entry_points_reach_lm_evals_registry():
    declared = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert NAMES <= declared, "reinstall the package (pip install --no-deps -e .) to refresh its entry points"
    assert NAMES <= set(register_models())
    assert NAMES <= set(register_models())  # a second registration is a no-op, not a clash
    assert get_model("refusion") is RefusionLM
    assert get_model("hf").__name__ == "HFLM"  # lm-eval's built-ins are still there
    assert all(get_model(name).default_model in MODELS for name in NAMES - {"dllm-harness"})


def test_every_family_has_an_alias():
    """``lm_eval --model <alias>`` for every adapter kind but the served ones (lm-eval has its own ``vllm`` and
    ``local-chat-completions``)."""
    register_models()
    served = {MODELS[get_model(name).default_model].kind for name in NAMES - {"dllm-harness"}}
    assert served == set(ADAPTERS) - {"vllm", "openai"}
    assert all(family.lm_eval for family in FAMILIES if family.name not in ("vllm", "openai"))


def test_bad_model_arguments_fail_with_one_line():
    with pytest.raises(HarnessLMError, match="unknown harness model 'nope'"):
        HarnessLM(model="nope")
    with pytest.raises(HarnessLMError, match="give the harness model"):
        HarnessLM()
    with pytest.raises(HarnessLMError, match="batch_size must be a whole number"):
        HarnessLM(model="tiny-qwen3", device="cpu", batch_size="auto")
    with pytest.raises(ConfigError, match="unknown option bogus"):
        HarnessLM(model="tiny-qwen3", device="cpu", bogus=1)
    lm = HarnessLM(model="tiny-qwen3", device="cpu", max_batch_size=None, trust_remote_code=True)
    with pytest.raises(NotImplementedError, match="generates only"):
        lm.loglikelihood([])


def test_speed_folder_follows_output_path():
    assert speed_folder(["--tasks", "x", "--output_path", "out/run"]) == "out/run"
    assert speed_folder(["-o", "out/results.json"]) == "out"
    assert speed_folder(["--tasks", "x"]) is None
    for program in ("/venv/bin/lm_eval", "lm-eval", "/site-packages/lm_eval/__main__.py"):
        assert lm_eval_cli_output_folder([program, "run", "--output_path", "out"]) == "out", program
    for program in ("/venv/bin/pytest", "/project/lm_eval/script.py"):  # not lm-eval's CLI
        assert lm_eval_cli_output_folder([program, "--output_path", "out"]) is None, program
    assert lm_eval_cli_output_folder([]) is None


@pytest.mark.parametrize("model", ["tiny-qwen3", "tiny-refusion"])
def test_same_prompts_generations_and_speed_fields_as_the_harness(model, harness_run, read_samples, task_dir,
                                                                   tmp_path):
    output = harness_run(model)
    harness = read_samples(output, model)
    assert len(harness) == 3 and any(r["text"].strip() for r in harness)

    lm = HarnessLM(model=model, device="cpu", speed_output=str(tmp_path))
    results = lm_eval.simple_evaluate(
        model=lm, tasks=[TASK], task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
        apply_chat_template=True, gen_kwargs=f"max_gen_toks={GEN_LENGTH}", log_samples=True, bootstrap_iters=0)

    logged = {s["doc_id"]: s for s in results["samples"][TASK]}  # one entry per filter, same context and output
    assert sorted(logged) == [0, 1, 2]
    for record in harness:
        sample = logged[int(record["doc_id"])]
        assert sample["arguments"][0][0] == record["prompt"]  # lm-eval's chat rendering == the harness's
        assert sample["resps"][0][0] == record["text"]

    ours = results["config"]["dllm_harness"]["speed"][TASK]
    theirs = json.loads((output / "results.json").read_text())["results"][0]["speed"]
    for field in ("tokens_per_forward", "forwards_per_sample", "gen_tokens_mean", "gen_tokens_after_stop_mean",
                  "canvas_tokens", "warmup_samples", "timed_samples", "batch_size", "token_definition"):
        assert ours[field] == theirs[field], field
    assert ours["canvas_tokens"] == GEN_LENGTH and ours["timed_samples"] == 2
    assert ours["tokens_per_second"] > 0 and ours["peak_memory_bytes"] > 0

    folder = tmp_path / model
    summary = json.loads((folder / f"dllm_speed_{lm.stamp}.json").read_text())
    assert summary["speed"][TASK] == ours and summary["model"] == model
    records = [json.loads(line) for line in (folder / f"dllm_speed_samples_{TASK}_{lm.stamp}.jsonl").open()]
    assert [r["token_ids"] for r in records] == [r["token_ids"] for r in harness]
    assert [r["warmup"] for r in records] == [True, False, False]
    assert {"latency_s", "batch_latency_s", "nfe", "gen_tokens", "hit_max_tokens", "rank"} <= set(records[0])


@pytest.mark.slow
def test_dllm_lm_eval_is_lm_evals_cli_with_the_models(task_dir, tmp_path, monkeypatch):
    """``dllm-lm-eval --model qwen3-harness ...``: lm-eval's results and the speed files land in one folder."""
    monkeypatch.delenv(SPEED_OUTPUT_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main() hands lm-eval's parser its arguments through sys.argv
    status = main(["--model", "qwen3-harness", "--model_args", "model=tiny-qwen3", "--device", "cpu",
                   "--tasks", TASK, "--include_path", str(task_dir), "--apply_chat_template", "--limit", "2",
                   "--gen_kwargs", "max_gen_toks=4", "--output_path", str(tmp_path)])
    assert status == 0
    folder = tmp_path / "tiny-qwen3"
    (results,) = folder.glob("results_*.json")
    info = json.loads(results.read_text())["config"]["dllm_harness"]
    assert info["model"] == "tiny-qwen3" and info["speed"][TASK]["canvas_tokens"] == 4
    (speed,) = folder.glob("dllm_speed_2*.json")
    assert json.loads(speed.read_text())["speed"] == info["speed"]
    assert [str(speed), *map(str, folder.glob("dllm_speed_samples_*.jsonl"))] == info["speed_files"]



@pytest.mark.slow
def test_dllm_lm_eval_reports_a_bad_model_argument_in_one_line(task_dir, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    status = main(["--model", "refusion", "--model_args", "model=nope", "--device", "cpu", "--tasks", TASK,
                   "--include_path", str(task_dir)])
    assert status == 2
    err = capsys.readouterr().err
    error = err.strip().splitlines()[-1]
    assert "Traceback" not in err and error.startswith("error: unknown harness model 'nope'; valid: ") and "tiny-refusion" in error
