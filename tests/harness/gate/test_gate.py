"""The regression gate: real drops fail, noise passes, speed drops fail, incomparable or bad input exits 2."""

from __future__ import annotations

import json

import pytest

from harness.gate.checks import NOT_COMPARABLE, PASS, REGRESSION, main_gate
from harness.stats.significance import looks_binary, paired_test, unpaired_test
from harness.stats.estimates import summarize


def flip(scores: list[float], count: int, value_from: float = 1.0) -> list[float]:
    """The first ``count`` items scored ``value_from`` get the other score."""
    out, done = list(scores), 0
    for i, s in enumerate(out):
        if done < count and s == value_from:
            out[i] = 1.0 - value_from
            done += 1
    return out


def runs(tmp_path, rf, base_scores, cand_scores, *, tasks=("gsm8k",), with_samples=True, base_tps=None,
         cand_tps=None, cand_version="task-v1"):
    base = rf.write_run(tmp_path / "base", [rf.Entry("m", t, rf.samples(base_scores), tps_override=base_tps)
                                            for t in tasks], with_samples=with_samples)
    cand = rf.write_run(tmp_path / "cand", [rf.Entry("m", t, rf.samples(cand_scores), tps_override=cand_tps,
                                                     task_version=cand_version) for t in tasks],
                        with_samples=with_samples)
    return base, cand


def gate(capsys, *argv: str) -> tuple[int, str, str]:
    code = main_gate(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_real_accuracy_drop_fails(tmp_path, rf, capsys):
    base_scores = [1.0] * 160 + [0.0] * 40  # 80%
    base, cand = runs(tmp_path, rf, base_scores, flip(base_scores, 30))  # 65%: 30 right->wrong, 0 back
    code, out, _ = gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--max-accuracy-drop", "5")
    assert code == REGRESSION
    assert "ACCURACY" in out and "McNemar" in out and "30/0" in out and "gate: FAIL" in out


def test_same_size_drop_on_few_samples_is_noise(tmp_path, rf, capsys):
    base_scores = [1.0] * 16 + [0.0] * 4  # 80% of 20
    base, cand = runs(tmp_path, rf, base_scores, flip(base_scores, 3))  # 65%: the same 15-point drop
    code, out, _ = gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--allow-underpowered")
    assert code == PASS, out
    assert "-15.00" in out and "gate: PASS" in out


def test_unpaired_comparison_without_sample_records(tmp_path, rf, capsys):
    base_scores = [1.0] * 160 + [0.0] * 40
    base, cand = runs(tmp_path, rf, base_scores, flip(base_scores, 30), with_samples=False)
    code, out, _ = gate(capsys, "--baseline", str(base / "results.json"), "--candidate", str(cand / "results.json"),
                        "--max-accuracy-drop", "5")
    assert code == REGRESSION and "Fisher exact (unpaired)" in out
    few = [1.0] * 16 + [0.0] * 4
    base, cand = runs(tmp_path / "few", rf, few, flip(few, 3), with_samples=False)
    code, out, _ = gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--allow-underpowered")
    assert code == PASS and "Fisher" in out


def test_holm_correction_across_tasks(tmp_path, rf, capsys):
    base_scores = [1.0] * 40 + [0.0] * 10
    cand_scores = flip(base_scores, 7)  # 7 discordant, all right->wrong: exact p = 2 * 0.5**7 = 0.0156
    base, cand = runs(tmp_path / "one", rf, base_scores, cand_scores)
    assert gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--max-accuracy-drop", "10")[0] == REGRESSION
    # The same drop on four tasks: Holm multiplies the smallest p by 4 (0.0625), so nothing is significant.
    tasks = ("gsm8k", "mbpp", "math", "arc_challenge")
    base, cand = runs(tmp_path / "four", rf, base_scores, cand_scores, tasks=tasks)
    # ... which the power check says beforehand: under Holm over 4 a drop needs 8 items (p < 0.0125), 50 items
    # at a 10-point tolerance give 6.
    code, _, err = gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--max-accuracy-drop", "10")
    assert code == NOT_COMPARABLE and "underpowered" in err and "8 items" in err
    code, out, _ = gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--allow-underpowered")
    assert code == PASS, out
    assert out.count("0.0156") == 4 and out.count("0.0625") == 4


def test_tolerance_allows_a_significant_small_drop(tmp_path, rf, capsys):
    base_scores = [1.0] * 900 + [0.0] * 100
    base, cand = runs(tmp_path, rf, base_scores, flip(base_scores, 20))  # -2 points, p < 1e-5
    assert gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--max-accuracy-drop", "3")[0] == PASS
    assert gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--max-accuracy-drop", "1")[0] == REGRESSION


def test_improvement_is_not_a_regression(tmp_path, rf, capsys):
    base_scores = [1.0] * 100 + [0.0] * 100
    base, cand = runs(tmp_path, rf, base_scores, flip(base_scores, 60, value_from=0.0))
    assert gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--max-accuracy-drop", "5")[0] == PASS


def test_throughput_drop_beyond_tolerance_fails(tmp_path, rf, capsys):
    scores = [1.0] * 10 + [0.0] * 10
    base, cand = runs(tmp_path, rf, scores, scores, base_tps=100.0, cand_tps=70.0)
    code, out, _ = gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--max-tps-drop", "0.2",
                        "--max-accuracy-drop", "100")
    assert code == REGRESSION and "SPEED" in out and "-30.0% (run, raw)" in out
    code, out, _ = gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--max-tps-drop", "0.35",
                        "--max-accuracy-drop", "100")
    assert code == PASS


def test_different_task_versions_are_not_comparable(tmp_path, rf, capsys):
    scores = [1.0] * 10 + [0.0] * 10
    base, cand = runs(tmp_path, rf, scores, scores, cand_version="task-v2")
    code, out, err = gate(capsys, "--baseline", str(base), "--candidate", str(cand))
    assert code == NOT_COMPARABLE and out == ""
    assert len(err.strip().splitlines()) == 1 and "task_version" in err and "task-v2" in err


def test_missing_task_in_candidate_is_not_comparable(tmp_path, rf, capsys):
    scores = [1.0] * 10
    base = rf.write_run(tmp_path / "b", [rf.Entry("m", "gsm8k", rf.samples(scores)),
                                         rf.Entry("m", "mbpp", rf.samples(scores))])
    cand = rf.write_run(tmp_path / "c", [rf.Entry("m", "gsm8k", rf.samples(scores))])
    code, _, err = gate(capsys, "--baseline", str(base), "--candidate", str(cand))
    assert code == NOT_COMPARABLE and "mbpp" in err and len(err.strip().splitlines()) == 1
    assert gate(capsys, "--baseline", str(base), "--candidate", str(cand), "--tasks", "gsm8k",
                "--allow-underpowered")[0] == PASS


@pytest.mark.parametrize("make_bad", ["missing", "folder", "not_json", "not_results"])
def test_bad_paths_exit_2_with_one_line(tmp_path, rf, capsys, make_bad):
    good = rf.write_run(tmp_path / "good", [rf.Entry("m", "gsm8k", rf.samples([1.0, 0.0]))])
    bad = tmp_path / "bad"
    if make_bad == "folder":
        bad.mkdir()
    elif make_bad == "not_json":
        bad.write_text("{not json")
    elif make_bad == "not_results":
        bad.write_text(json.dumps({"hello": 1}))
    code, out, err = gate(capsys, "--baseline", str(good), "--candidate", str(bad))
    assert code == NOT_COMPARABLE and out == ""
    assert len(err.strip().splitlines()) == 1 and str(bad) in err


@pytest.mark.parametrize("argv", [["--alpha", "2"], ["--max-tps-drop", "1.5"], ["--max-accuracy-drop", "-1"],
                                  ["--alpha", "x"], ["--bogus"], ["--max-changed-outputs", "-1"],
                                  ["--max-forwards-increase", "-0.1"]])
def test_bad_options_exit_2_with_one_line(tmp_path, rf, capsys, argv):
    run = rf.write_run(tmp_path / "r", [rf.Entry("m", "gsm8k", rf.samples([1.0, 0.0]))])
    code, out, err = gate(capsys, "--baseline", str(run), "--candidate", str(run), *argv)
    assert code == NOT_COMPARABLE and out == "" and len(err.strip().splitlines()) == 1


def test_missing_required_option_exits_2(capsys):
    code, _, err = gate(capsys, "--baseline", "x")
    assert code == NOT_COMPARABLE and "--candidate" in err


def test_paired_test_counts_discordant_pairs():
    pairs = [(1.0, 0.0)] * 5 + [(0.0, 1.0)] * 2 + [(1.0, 1.0)] * 10
    t = paired_test(pairs)
    assert (t.right_to_wrong, t.wrong_to_right) == (5, 2)
    assert t.p_value == pytest.approx(0.453125)  # two-sided binomial, 7 trials, 5 successes
    graded = paired_test([(0.5, 0.25), (0.75, 0.5), (1.0, 0.5), (0.5, 0.5)])
    assert graded.test.startswith("paired t") and 0 < graded.p_value < 1


def test_looks_binary_tells_0_1_summaries_from_graded_ones():
    assert looks_binary(summarize([1.0, 0.0, 1.0, 1.0]).as_dict())
    assert looks_binary(summarize([0.0, 0.0, 0.0]).as_dict())
    assert not looks_binary(summarize([0.5, 0.25, 1.0, 0.75]).as_dict())
    fisher = unpaired_test(summarize([1.0] * 8 + [0.0] * 2).as_dict(), summarize([1.0] * 2 + [0.0] * 8).as_dict())
    assert fisher.test.startswith("Fisher") and fisher.p_value == pytest.approx(0.0230, abs=1e-3)
    welch = unpaired_test(summarize([0.5, 0.6, 0.7]).as_dict(), summarize([0.5, 0.6, 0.71]).as_dict())
    assert welch.test.startswith("Welch") and welch.p_value > 0.5
