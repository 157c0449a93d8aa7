"""``run_eval.py sweep`` end to end on a tiny model: bad input fails before anything runs, points that resolve to
the same configuration share generations, and an interrupted sweep resumes without regenerating."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from harness.cli import main
from harness.sweep.plan import Point, SweepPlan, SweepTiming, load_plan, load_timing
from harness.sweep.retime import interleaved_rounds, timing_is_current, timing_prompts
from models.options import option
from models.registry import load_adapter, spec_for
from reports.frontier.frame import frontier_frame


def sweep_args(out: Path, *extra: str, model: str = "tiny-qwen3") -> list[str]:
    return ["sweep", "--models", model, "--tasks", "gsm8k", "--data", "fixtures", "--limit", "3", "--gen-length", "8",
            "--no-progress", "--output", str(out), *extra]


@pytest.mark.parametrize("extra, needle", [
    (["--grid", "tiny-qwen3.top_q=1.0,0.5"], "unknown option top_q"),
    (["--grid", "tiny-dream.steps=1,2"], "not in --models"),
    (["--grid", "batch_size=1,zero"], "batch_size must be a whole number"),
    (["--grid", "tiny-qwen3.top_p=1.0,1.0"], "lists a value twice"),
    (["--grid", "tiny-qwen3.top_p"], "is not MODEL.OPTION=V1,V2"),
    (["--grid", "tiny-qwen3.top_p=0.5", "--grid", "top_p=0.7"], "sets tiny-qwen3.top_p twice"),
    (["--grid", "tiny-qwen3.top_p=0.5", "--reference", "batch_size=8"], "not a measured batch size"),
    (["--grid", "tiny-qwen3.top_p=0.5", "--model-arg", "tiny-qwen3.top_p=0.9"], "also set by --model-arg"),
    (["--grid", "tiny-qwen3.top_p=0.5", "--alpha", "2"], "--alpha must be between 0 and 1"),
    ([], "give at least one --grid"),
    # the last point's value is the bad one: every point is checked before the first runs
    (["--grid", "tiny-qwen3.top_p=1.0,0.5,1.5", "--grid", "batch_size=1,2"], "top_p=1.5: tiny-qwen3: top_p must be"),
    # values are typed by the model's config exactly as --model-arg's are, before any model loads
    (["--grid", "tiny-qwen3.top_k=abc"], "--grid: tiny-qwen3: option top_k=abc is not an int"),
    (["--grid", "tiny-qwen3.top_p=0.5", "--reference", "tiny-qwen3.top_k=1.5"], "option top_k=1.5 is not an int"),
    (["--grid", "gen_length=8,eight"], "option gen_length=eight is not an int"),
    (["--grid", "tiny-qwen3.top_p=0.5", "--repeats", "0"], "--repeats must be at least 1, got 0"),
    (["--grid", "tiny-qwen3.top_p=0.5", "--timing-prompts", "0"], "--timing-prompts must be at least 1"),
])
def test_bad_input_is_one_line_before_anything_runs(tmp_path, capsys, extra, needle):
    out = tmp_path / "sweep"
    status = main(sweep_args(out, *extra))
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert needle in err and "Traceback" not in err
    assert not out.exists()


def test_help_and_list_explain_the_grid(capsys):
    assert main(["sweep", "--help"]) == 0
    text = capsys.readouterr().out
    assert "Cartesian product" in text and "batch_size=1,4,16" in text and "frontier.html" in text
    assert main(["sweep", "--list"]) == 0
    text = capsys.readouterr().out
    assert "sweep axes" in text and "slot_threshold" in text and "tiny-refusion" in text


def test_timing_passes_are_interleaved():
    """Every pass visits every point once, alternating direction, so each point is timed early and late alike:
    over an even number of passes every point's mean position is the same."""
    rounds = interleaved_rounds(["a", "b", "c"], 4)
    assert rounds == (("a", "b", "c"), ("c", "b", "a"), ("a", "b", "c"), ("c", "b", "a"))
    positions = {name: sum(r.index(name) for r in rounds) for name in "abc"}
    assert len(set(positions.values())) == 1


def test_timing_prompts_fill_the_largest_batch():
    assert timing_prompts(4, [1, 2]) == 4
    assert timing_prompts(4, [1, 16]) == 16  # at least one full batch of the largest size
    assert timing_prompts(4, [1, 3]) == 6  # a multiple of the largest, so its batches are full


def test_timing_file_round_trip_and_reuse(tmp_path):
    points = (Point("tiny-qwen3", (), 1), Point("tiny-qwen3", (), 2))
    plan = SweepPlan(tmp_path, ("tiny-qwen3",), ("gsm8k",), points, {"tiny-qwen3": points[0].name}, 0.05)
    names = [p.name for p in points]
    passes = {n: {"gsm8k": [(80, 2.0), (80, 4.0)]} for n in names}
    SweepTiming(2, 4, interleaved_rounds(names, 2), passes).write(tmp_path)
    timing = load_timing(tmp_path)
    assert timing is not None and timing.tokens_per_second(names[0], "gsm8k") == (40.0, 20.0)
    assert timing.tokens_per_second(names[0], "mbpp") is None
    assert timing_is_current(tmp_path, plan, 2, 4)
    assert not timing_is_current(tmp_path, plan, 6, 4)  # asked for more passes: re-time
    assert not timing_is_current(tmp_path, plan, 2, 8)
    bigger = SweepPlan(tmp_path, plan.models, plan.tasks, points + (Point("tiny-qwen3", (), 4),), plan.references, 0.05)
    assert not timing_is_current(tmp_path, bigger, 2, 4)  # a new point: every point is re-timed together


def test_point_names_spell_settings():
    point = Point("tiny-refusion", (("slot_threshold", "0.5"), ("slot_size", "4")), 16)
    assert point.name == "tiny-refusion__slot_threshold=0.5__slot_size=4__batch_size=16"
    assert point.overrides == {"slot_threshold": "0.5", "slot_size": "4"}  # text, as --model-arg gives it
    assert Point("hf:org/model", (), 1).name == "hf_org_model__defaults__batch_size=1"


def test_point_options_are_typed_by_the_models_config():
    """A point's text becomes the config's types in models.options, the one place --model-arg is typed too."""
    adapter = load_adapter(spec_for("tiny-refusion"), torch.device("cpu"), torch.float32)
    config = adapter.make_config(Point("tiny-refusion", (("slot_threshold", "0.5"), ("slot_size", "4")), 1).overrides)
    assert option(config.decoder, "slot_threshold") == 0.5 and option(config.decoder, "slot_size") == 4
    assert isinstance(option(config.decoder, "slot_size"), int)
    fast = load_adapter(spec_for("tiny-llada-fastdllm"), torch.device("cpu"), torch.float32)
    assert option(fast.make_config(Point("tiny-llada-fastdllm", (("cache", "none"),), 1).overrides).decoder,
                  "cache") == "none"  # a text choice keeps its text


def store_records(root: Path) -> dict[int, list[dict]]:
    out = {}
    for shard in sorted(root.glob("store/batch_size=*/tiny-qwen3/gsm8k/shard-*.jsonl")):
        size = int(shard.parts[-4].split("=")[1])
        out[size] = [json.loads(line) for line in shard.read_text(encoding="utf-8").splitlines()]
    return out


@pytest.mark.slow
def test_real_sweep_shares_generations_and_resumes(tmp_path, capsys):
    """seed=null takes the run's seed (1234), so the two seed points resolve to one configuration: per batch size
    the store holds each item once, and the second point generated nothing."""
    out = tmp_path / "sweep"
    args = sweep_args(out, "--grid", "tiny-qwen3.seed=null,1234", "--grid", "batch_size=1,2", "--repeats", "6",
                      "--timing-prompts", "2")
    assert main(args) == 0
    assert "timing 4 points in 6 interleaved passes (2 prompts per task each)" in capsys.readouterr().out
    plan = load_plan(out)
    names = {p.name for p in plan.points}
    assert names == {f"tiny-qwen3__seed={s}__batch_size={b}" for s in ("null", "1234") for b in (1, 2)}
    # the default configuration resolves to the seed=null point, so that is the reference; no extra point
    assert plan.references == {"tiny-qwen3": "tiny-qwen3__seed=null__batch_size=1"}

    stored = store_records(out)
    assert sorted(stored) == [1, 2]
    for size, records in stored.items():
        keys = [r["key"] for r in records]
        assert len(keys) == 3 and len(set(keys)) == 3  # three items, each generated once for two points
        assert max(r["batch_size"] for r in records) == size  # timed in batches of that size
    for size in (1, 2):
        a, b = (pd.read_json(out / f"tiny-qwen3__seed={s}__batch_size={size}" / "samples" / "tiny-qwen3" /
                             "gsm8k.jsonl", lines=True) for s in ("null", "1234"))
        assert list(a["key"]) == list(b["key"]) and list(a["text"]) == list(b["text"])

    timing = load_timing(out)
    assert timing is not None and timing.order == interleaved_rounds([p.name for p in plan.points], 6)
    for point in plan.points:
        passes = timing.passes[point.name]["gsm8k"]
        assert len(passes) == 6 and all(tokens > 0 and seconds > 0 for tokens, seconds in passes)
    frame = frontier_frame(out)
    assert len(frame) == 4 and frame["matched"].all() and not frame["significantly_worse"].any()
    assert (frame["timing_passes"] == 6).all() and frame["speedup_low"].notna().all()
    assert frame["speedup_verdict"].notna().sum() == 3  # every point but the reference
    same = frame[frame["point"] == "tiny-qwen3__seed=1234__batch_size=1"].iloc[0]
    assert same["p_value"] == 1.0 and same["right_to_wrong"] == 0 and same["wrong_to_right"] == 0
    assert (out / "frontier.html").is_file() and len(pd.read_csv(out / "frontier.csv")) == 4

    # interrupted: one point lost its results, and the batch-2 store lost its last two generations
    (out / "tiny-qwen3__seed=1234__batch_size=1" / "results.json").unlink()
    shard = next(out.glob("store/batch_size=2/tiny-qwen3/gsm8k/shard-*.jsonl"))
    lines = shard.read_text(encoding="utf-8").splitlines(keepends=True)
    shard.write_text(lines[0] + lines[1][:10], encoding="utf-8")  # a torn last line, as a killed writer leaves
    for s in ("null", "1234"):
        (out / f"tiny-qwen3__seed={s}__batch_size=2" / "results.json").unlink()
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "4 points, 1 already finished" in printed and "timing 4 points" in printed  # points ran: re-timed
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "4 points, 4 already finished" in printed and "timing 4 points" not in printed  # nothing ran: kept
    again = store_records(out)
    assert [r["key"] for r in again[1]] == [r["key"] for r in stored[1]]  # nothing regenerated at batch 1
    assert sorted(r["key"] for r in again[2]) == sorted(r["key"] for r in stored[2])  # only the lost two
    assert len(again[2]) == 3
    assert len(frontier_frame(out)) == 4
