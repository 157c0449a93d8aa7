"""``decode_order``: per-sample order figures and the per-(model, task) summary, against orders known by hand."""

from __future__ import annotations

import json
import random

import pytest

from harness.cli import main
from harness.stats.aggregate import aggregate, decode_order
from harness.stats.order import committed_by_tenth, order_record, sample_order

# Permutations of four tokens' commit steps with 0..5 inversions: tau-b = (6 - 2 * inversions) / 6, no ties.
BY_INVERSIONS = ([1, 2, 3, 4], [2, 1, 3, 4], [3, 1, 2, 4], [4, 1, 2, 3], [4, 2, 1, 3], [4, 3, 1, 2])


def sample(commit_step, correct):
    """A scored record as the runner writes it: its commit steps and the order figures scoring adds."""
    steps = {"commit_step": commit_step}
    return {**steps, "scores": {"acc": float(correct)}, **order_record(steps)}


def test_autoregressive_is_tau_one_with_a_flat_profile():
    for n in (20, 7):  # seven forwards: every tenth of them straddles two, and the profile is still exact
        order = sample_order(list(range(1, n + 1)))
        assert order == {"order_tau": 1.0, "parallelism_profile": [1.0] * 10, "last_tenth_share": 0.1}


def test_right_to_left_is_tau_minus_one():
    assert sample_order([5, 4, 3, 2, 1])["order_tau"] == -1.0


def test_one_forward_has_no_tau_and_nothing_generated_no_figures():
    order = sample_order([1, 1, 1])
    assert order["order_tau"] is None
    assert order["parallelism_profile"] == [3.0] * 10  # three tokens in one forward, spread over its tenths
    assert sample_order([]) is None


def test_profile_and_last_tenth_by_hand():
    # five forwards, each covering two tenths: 4 tokens, then 1, 1, 1, then 3
    order = sample_order([1, 1, 1, 1, 2, 3, 4, 5, 5, 5])
    assert order["parallelism_profile"] == [4.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0]
    assert order["last_tenth_share"] == pytest.approx(1.5 / 10)  # half of forward 5's three tokens
    # four forwards, tenths of 0.4 forwards: the third tenth (forwards 0.8-1.2) holds 0.2 of forward 1's one token
    # and 0.2 of forward 2's two, 0.6 tokens in 0.4 forwards; forward 3 committed nothing
    order = sample_order([1, 2, 2, 4])
    assert order["parallelism_profile"] == pytest.approx([1.0, 1.0, 1.5, 2.0, 2.0, 0.0, 0.0, 0.5, 1.0, 1.0])
    assert order["last_tenth_share"] == pytest.approx(0.4 / 4)


@pytest.mark.parametrize("seed", range(10))
def test_tenths_hold_every_token_and_the_profile_averages_to_tokens_per_forward(seed):
    rng = random.Random(seed)
    steps = [rng.randint(1, rng.randint(1, 60)) for _ in range(rng.randint(1, 200))]
    assert sum(committed_by_tenth(steps)) == 10 * len(steps)
    profile = sample_order(steps)["parallelism_profile"]
    assert sum(profile) / 10 == pytest.approx(len(steps) / max(steps))


def test_summary_splits_accuracy_at_the_median_tau_with_fishers_exact_test():
    # taus 1, 2/3, 1/3 (right) and 0, -1/3, -2/3 (wrong): median 1/6, three in each half
    samples = [sample(steps, inversions < 3) for inversions, steps in enumerate(BY_INVERSIONS)]
    samples += [sample(None, True), sample([2, 2, 2], True)]  # no record (an engine), no order (one forward)
    summary = decode_order(samples, "acc")
    assert (summary["samples"], summary["skipped"]) == (6, 2)
    assert summary["order_tau"] == pytest.approx({"mean": 1 / 6, "median": 1 / 6})
    split = summary["by_order"]
    assert (split["below_median"]["value"], split["below_median"]["n"]) == (0.0, 3)
    assert (split["above_median"]["value"], split["above_median"]["n"]) == (1.0, 3)
    # 2x2 table [[3, 0], [0, 3]]: of the C(6, 3) = 20 ways to pick the three right answers, the two as extreme
    assert split["test"] == "Fisher exact (unpaired)"
    assert split["p_value"] == pytest.approx(2 / 20)


def test_the_median_sample_sits_in_neither_half():
    samples = [sample(steps, True) for steps in BY_INVERSIONS[:5]]  # taus 1, 2/3, 1/3, 0, -1/3: median 1/3
    split = decode_order(samples, "acc")["by_order"]
    assert split["below_median"]["n"] == split["above_median"]["n"] == 2
    assert split["p_value"] == 1.0


def test_profile_and_share_are_means_over_samples():
    summary = decode_order([sample(list(range(1, 11)), True), sample([1, 1, 1, 1, 2, 3, 4, 5, 5, 5], False)], "acc")
    assert summary["parallelism_profile"] == [2.5, 2.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0]
    assert summary["last_tenth_share"] == pytest.approx((0.1 + 0.15) / 2)


def test_no_split_where_every_tau_is_equal_and_no_summary_without_commit_steps():
    assert decode_order([sample(list(range(1, 9)), i % 2) for i in range(4)], "acc")["by_order"] is None
    assert decode_order([sample(None, True)], "acc") is None


def test_scored_records_and_results_carry_it():
    assert order_record({"text": "x"}) == {}
    assert order_record({"commit_step": [1, 2]}) == {"decode_order": sample_order([1, 2])}
    record = {"scores": {"acc": 1.0}, "gen_tokens": 2, "gen_tokens_after_stop": 2, "canvas_tokens": 8, "nfe": 2,
              "forwards": 2, "latency_s": 0.1, "hit_max_tokens": False, "warmup": False, "batch_size": 1}
    assert aggregate([record], "acc", 1, None)["decode_order"] is None
    scored = {**record, "commit_step": [1, 2], **order_record({"commit_step": [1, 2]})}
    assert aggregate([scored], "acc", 1, None)["decode_order"]["samples"] == 1


def test_a_run_writes_decode_order(tmp_path):
    status = main(["--models", "tiny-qwen3,tiny-sdar", "--tasks", "gsm8k", "--data", "fixtures", "--preset", "smoke",
                   "--output", str(tmp_path), "--no-progress"])
    assert status == 0
    entries = {e["model"]: e for e in json.loads((tmp_path / "results.json").read_text())["results"]}
    ar, sdar = entries["tiny-qwen3"]["decode_order"], entries["tiny-sdar"]["decode_order"]
    assert ar["order_tau"] == {"mean": 1.0, "median": 1.0} and ar["parallelism_profile"] == [1.0] * 10
    assert ar["samples"] == entries["tiny-qwen3"]["n_samples"] and ar["skipped"] == 0
    assert -1.0 <= sdar["order_tau"]["mean"] < 1.0
    lines = (tmp_path / "samples" / "tiny-qwen3" / "gsm8k.jsonl").read_text().splitlines()
    assert all(json.loads(line)["decode_order"]["order_tau"] == 1.0 for line in lines)
