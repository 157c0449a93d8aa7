"""``run_eval.py export RUN --format lm-eval`` on a real tiny run (tiny-qwen3 on the GSM8K fixtures, --preset smoke):
the files are checked against lm-eval 0.4.13's ``result_schema`` types, read back with lm-eval's own code (its file
name parsers, its results table, its W&B results reader, the ``datasets`` JSON loader its hub upload relies on), and
compared with what lm-eval's own ``EvaluationTracker`` writes from the same results and samples."""

from __future__ import annotations

import json
import types
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.export.lm_eval_layout import date_id, model_args
from harness.run.records import ResultEntry

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901)
ITEMS = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished run folder, made by the runner itself (the command line's run, without its HTML report)."""
    from harness.run.runner import Runner, RunSettings

    folder = tmp_path_factory.mktemp("export") / "run"
    Runner(RunSettings(models=("tiny-qwen3",), tasks=("gsm8k",), output=folder, limit=ITEMS, data="fixtures",
                       preset="smoke", progress=False, threads=1)).run()
    return folder


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    from harness.export.lm_eval_layout import export_run
    from harness.run.folder import load_run

    out = tmp_path_factory.mktemp("lm-eval")
    (model,) = export_run(load_run(run), out, NOW)
    results = json.loads(model.results.read_text())
    lines = [json.loads(line) for line in model.samples["gsm8k"].read_text().splitlines()]
    harness = json.loads((run / "results.json").read_text())["results"][0]
    samples = [json.loads(line) for line in (run / "samples" / "tiny-qwen3" / "gsm8k.jsonl").read_text().splitlines()]
    return types.SimpleNamespace(out=out, model=model, results=results, lines=lines, harness=harness, samples=samples)


def test_the_files_are_named_and_placed_as_lm_eval_names_them(exported):
    from lm_eval.utils import (get_file_datetime, get_file_task_name, get_latest_filename, get_results_filenames,
                               get_sample_results_filenames)

    files = sorted(str(p.relative_to(exported.out)) for p in exported.out.rglob("*") if p.is_file())
    stamp = date_id(NOW)
    assert stamp == NOW.isoformat().replace(":", "-")
    assert files == [f"tiny-qwen3/results_{stamp}.json", f"tiny-qwen3/samples_gsm8k_{stamp}.jsonl"]
    assert get_results_filenames(files) == [files[0]] and get_sample_results_filenames(files) == [files[1]]
    assert get_file_task_name(Path(files[1]).name) == "gsm8k"
    # lm-eval's parser strips ".jsonl" only, so a results file's "datetime" keeps ".json": as for its own files
    assert get_file_datetime(files[1]) == stamp and get_file_datetime(files[0]) == f"{stamp}.json"
    assert get_latest_filename(get_sample_results_filenames(files)) == files[1]


def test_the_results_file_has_lm_eval_0_4_13s_types(exported):
    from pydantic import TypeAdapter
    from lm_eval.api.task import TaskConfig
    from lm_eval.result_schema import EvalResults

    results = exported.results
    # lm-eval's own task configs hold lists and mappings (metric_list, generation_kwargs), which the schema types as
    # str | bool | None: the export writes what lm-eval writes there, and every other key is checked as typed.
    assert isinstance(TaskConfig(task="t", metric_list=[{"metric": "acc"}]).to_dict()["metric_list"], list)
    checked = TypeAdapter(EvalResults).validate_python({k: v for k, v in results.items() if k != "configs"})
    assert checked["results"] == results["results"] and checked["config"] == results["config"]
    TypeAdapter(dict[str, dict[str, Any]]).validate_python(results["configs"])
    config = results["configs"]["gsm8k"]
    assert config["output_type"] == "generate_until" and config["metric_list"][0]["metric"] == "exact_match"
    for key in ("results", "configs", "versions", "n-shot", "n-samples", "higher_is_better", "config"):
        assert key in results


def test_the_results_carry_the_runs_metrics_model_and_speed(exported):
    task, harness = exported.results["results"]["gsm8k"], exported.harness
    for key, summary in harness["metrics"].items():
        metric, _, filt = key.partition(",")
        assert task[f"{metric},{filt}"] == summary["value"] and task[f"{metric}_stderr,{filt}"] == summary["stderr"]
    assert task["sample_len"] == ITEMS and exported.results["n-samples"]["gsm8k"] == {"original": 5,
                                                                                     "effective": ITEMS}
    assert exported.results["versions"]["gsm8k"] == harness["manifest"]["task_version"]
    assert exported.results["n-shot"] == {"gsm8k": 0}
    assert exported.results["higher_is_better"] == {"gsm8k": {"exact_match": True}}
    config = exported.results["config"]
    assert config["model"] == "tiny-qwen3" and config["random_seed"] == 1234 and config["limit"] == ITEMS
    assert exported.results["dllm_harness"]["speed"]["gsm8k"] == harness["speed"]
    assert exported.results["dllm_harness"]["manifest"]["gsm8k"] == harness["manifest"]


def test_every_sample_line_has_the_schemas_types_and_the_runs_scores(exported):
    from pydantic import TypeAdapter
    from lm_eval.result_schema import SampleResult

    check = TypeAdapter(SampleResult)
    for line in exported.lines:
        check.validate_python(line)
    filters = ["flexible-extract", "strict-match"]
    assert [(s["filter"], s["doc_id"]) for s in exported.lines] == [(f, i) for f in filters for i in range(ITEMS)]
    for line in exported.lines:
        sample = exported.samples[line["doc_id"]]
        assert line["exact_match"] == sample["scores"][f"exact_match,{line['filter']}"]
        assert line["filtered_resps"] == [sample["extracted"][line["filter"]]]
        assert line["resps"] == [[sample["raw_text"]]] and line["target"] == sample["target"]
        assert line["arguments"]["gen_args_0"]["arg_0"] == sample["prompt"]
        assert line["gen_tokens"] == sample["gen_tokens"] and line["latency_s"] == sample["latency_s"]


def test_lm_eval_reads_the_results_back(exported):
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker
    from lm_eval.loggers.wandb_logger import WandbLogger
    from lm_eval.utils import make_table

    results = exported.results
    value = results["results"]["gsm8k"]["exact_match,flexible-extract"]
    table = make_table(results)
    row = next(line for line in table.splitlines() if "flexible-extract" in line)
    cells = [cell.strip() for cell in row.split("|")[1:-1]]  # task, version, filter, n-shot, metric, ↑, value, ±, se
    assert cells[:6] == ["gsm8k", results["versions"]["gsm8k"], "flexible-extract", "0", "exact_match", "↑"]
    assert float(cells[6]) == value and cells[7] == "±"
    assert GeneralConfigTracker._get_model_name(results["config"]["model_args"]) == "tiny-qwen3"
    reader = types.SimpleNamespace(results=results, task_names=list(results["results"]))
    _, flat = WandbLogger._sanitize_results_dict(reader)
    assert flat["gsm8k/exact_match,flexible-extract"] == value


def test_the_samples_load_as_a_dataset_as_the_hub_upload_reads_them(exported):
    from datasets import load_dataset

    loaded = load_dataset("json", data_files=str(exported.model.samples["gsm8k"]), split="train")
    assert loaded.num_rows == 2 * ITEMS
    assert loaded[0]["resps"] == exported.lines[0]["resps"] and loaded[0]["doc_hash"] == exported.lines[0]["doc_hash"]


def test_lm_eval_s_own_writer_gives_the_same_files(exported, tmp_path):
    """lm-eval's EvaluationTracker, handed the exported results and the samples as it holds them in memory, writes
    the same samples lines and the same task hashes."""
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker

    results = exported.results
    tracker = EvaluationTracker(output_path=str(tmp_path))
    tracker.general_config_tracker.log_experiment_args("dllm-harness", results["config"]["model_args"], None, None,
                                                      False)
    in_memory = [{**line, "arguments": [list(args.values()) for args in line["arguments"].values()]}
                 for line in exported.lines]
    mine = {k: v for k, v in results.items() if k not in ("task_hashes", "dllm_harness")}
    tracker.save_results_aggregated(results=mine, samples={"gsm8k": in_memory})
    tracker.save_results_samples("gsm8k", [dict(line) for line in in_memory])
    (written,) = (tmp_path / "tiny-qwen3").glob("results_*.json")
    theirs = json.loads(written.read_text())
    assert theirs["task_hashes"] == results["task_hashes"]
    assert {k: theirs[k] for k in ("results", "configs", "versions", "n-shot", "n-samples", "config")} == \
        {k: results[k] for k in ("results", "configs", "versions", "n-shot", "n-samples", "config")}
    (samples,) = (tmp_path / "tiny-qwen3").glob("samples_gsm8k_*.jsonl")
    assert [json.loads(line) for line in samples.read_text().splitlines()] == exported.lines


def test_a_served_model_is_named_by_its_server_and_model():
    entry = ResultEntry.from_json({"model": "openai:http://h:1/v1", "task": "gsm8k", "n_samples": 1,
                                   "primary_metric": "m", "metrics": {}, "speed": {}, "diagnostics": {},
                                   "manifest": {"served": {"served_model": "qwen", "base_url": "http://h:1/v1"}}})
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker

    assert model_args(entry) == "model=qwen,base_url=http://h:1/v1"
    assert GeneralConfigTracker._get_model_name(model_args(entry)) == "qwen"


def test_the_command_writes_the_export_and_says_where(run, tmp_path, capsys):
    assert main(["export", str(run), "--format", "lm-eval", "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "tiny-qwen3:" in out and str(tmp_path / "out" / "tiny-qwen3") in out
    assert len(list((tmp_path / "out" / "tiny-qwen3").glob("*"))) == 2


@pytest.mark.parametrize("args, message", [
    (["--format", "csv"], "unknown format csv; valid formats: lm-eval"),
    ([], "the following arguments are required: --format"),
])
def test_a_bad_format_is_one_line(run, capsys, args, message):
    assert main(["export", str(run), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--format", "lm-eval"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "without results.json (not a finished run)" in err
    assert not list(tmp_path.iterdir())


def test_repeated_samples_are_an_items_responses(tmp_path):
    """``--samples K``: one line per item and filter, its K responses and filtered answers, its metrics their mean."""
    from harness.export.lm_eval_layout import export_run
    from harness.run.folder import load_run
    from harness.run.runner import Runner, RunSettings

    folder = tmp_path / "run"
    Runner(RunSettings(models=("tiny-qwen3",), tasks=("gsm8k",), output=folder, limit=2, data="fixtures",
                       preset="smoke", progress=False, threads=1, samples=3,
                       model_args={"tiny-qwen3": {"do_sample": True, "temperature": 1.0}})).run()
    (model,) = export_run(load_run(folder), tmp_path / "out", NOW)
    lines = [json.loads(line) for line in model.samples["gsm8k"].read_text().splitlines()]
    samples = [json.loads(line) for line in (folder / "samples" / "tiny-qwen3" / "gsm8k.jsonl").read_text().splitlines()]
    flexible = [line for line in lines if line["filter"] == "flexible-extract"]
    assert [line["doc_id"] for line in flexible] == [0, 1]
    for line, doc in zip(flexible, dict.fromkeys(s["doc_id"] for s in samples)):
        mine = sorted((s for s in samples if s["doc_id"] == doc), key=lambda s: s.get("sample", 0))
        assert line["resps"] == [[s["raw_text"] for s in mine]]
        assert line["filtered_resps"] == [s["extracted"]["flexible-extract"] for s in mine]
        assert line["exact_match"] == pytest.approx(
            sum(s["scores"]["exact_match,flexible-extract"] for s in mine) / 3)
