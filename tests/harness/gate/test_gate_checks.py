"""The gate's checks beyond accuracy, on synthetic run folders: output drift, forwards per token, the power refusal,
re-timed speed files, decoding changes and hardware warnings."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as scipy_stats

from harness.gate.checks import NOT_COMPARABLE, PASS, REGRESSION, main_gate
from harness.gate.drift import first_difference, is_deterministic
from harness.gate.power import (clustered_power, fisher_min_items, items_needed, mcnemar_min_items, paired_power,
                                smallest_flagged)
from harness.gate.retiming import FORMAT, speed_line
from harness.run.manifest import cpu_model
from harness.run.folder import GATE_SPEED_NAME as SPEED_FILE
from harness.run.records import ResultEntry

NO_ACCURACY = ("--max-accuracy-drop", "100")


def gate(capsys, base, cand, *argv: str) -> tuple[int, str, str]:
    code = main_gate(["--baseline", str(base), "--candidate", str(cand), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def two_runs(tmp_path, rf, base_records, cand_records, cand_decoding=None):
    base = rf.write_run(tmp_path / "base", [rf.Entry("m", "gsm8k", base_records)])
    entry = rf.Entry("m", "gsm8k", cand_records)
    if cand_decoding is not None:
        entry.decoding = cand_decoding
    return base, rf.write_run(tmp_path / "cand", [entry])


def test_changed_token_ids_fail_beyond_the_allowed_count(tmp_path, rf, capsys):
    scores = [0.0] * 20
    cand = rf.samples(scores)
    cand[0]["token_ids"][5] = 999
    cand[7]["token_ids"] = cand[7]["token_ids"][:12]  # a prefix: differs where the shorter one ends
    cand[9]["token_ids"][0] = 998
    base, cand_run = two_runs(tmp_path, rf, rf.samples(scores), cand)
    code, out, _ = gate(capsys, base, cand_run, *NO_ACCURACY, "--max-changed-outputs", "0")
    assert code == REGRESSION and "DRIFT" in out and "3/20" in out
    assert "3 of 20 outputs changed: doc 0 at token 5 (lengths 20/20), doc 7 at token 12 (lengths 20/12)" in out
    assert gate(capsys, base, cand_run, *NO_ACCURACY, "--max-changed-outputs", "3")[0] == PASS
    code, out, _ = gate(capsys, base, cand_run, *NO_ACCURACY)  # no limit given: reported, not gated
    assert code == PASS and "3 of 20 outputs changed" in out and "drift reported only" in out


def test_identical_outputs_pass_the_strictest_drift_gate(tmp_path, rf, capsys):
    base, cand = two_runs(tmp_path, rf, rf.samples([0.0] * 5), rf.samples([0.0] * 5))
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY, "--max-changed-outputs", "0")
    assert code == PASS and "0/5" in out and "accuracy not gated" in out


def test_more_forwards_per_token_fail_exactly(tmp_path, rf, capsys):
    base, cand = two_runs(tmp_path, rf, rf.samples([0.0] * 5, nfe=20.0), rf.samples([0.0] * 5, nfe=20.5))
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == REGRESSION and "FORWARDS" in out and "1.0000" in out and "1.0250" in out
    assert gate(capsys, base, cand, *NO_ACCURACY, "--max-forwards-increase", "0.05")[0] == PASS
    fewer = rf.samples([0.0] * 5, nfe=10.0)  # fewer forwards is an improvement
    base, cand = two_runs(tmp_path / "fewer", rf, rf.samples([0.0] * 5), fewer)
    assert gate(capsys, base, cand, *NO_ACCURACY)[0] == PASS


def test_too_few_items_for_the_tolerance_are_refused(tmp_path, rf, capsys):
    base, cand = two_runs(tmp_path, rf, rf.samples([1.0] * 5), rf.samples([0.0] * 5))  # 100% -> 0%
    code, out, err = gate(capsys, base, cand)
    assert code == NOT_COMPARABLE and out == "" and len(err.strip().splitlines()) == 1
    assert "underpowered: m · gsm8k: 5 paired items" in err and "needs n >= 500" in err
    code, out, _ = gate(capsys, base, cand, "--allow-underpowered")
    assert code == PASS and "-100.00" in out  # p = 0.0625: what the issue saw printed as PASS, now on request only
    assert " none " in out  # no drop of 5 items is detectable: said so, not shown like a graded score's "-"


def test_a_detectable_tolerance_is_accepted_and_printed(tmp_path, rf, capsys):
    base, cand = two_runs(tmp_path, rf, rf.samples([1.0] * 100), rf.samples([1.0] * 100))
    code, out, _ = gate(capsys, base, cand, "--max-accuracy-drop", "5")  # 6 lost items of 100 are detectable
    assert code == PASS and "min det. pts" in out and " 6.0 " in out


def test_mcnemar_bound_against_direct_binomial_tests():
    for threshold in (0.05, 0.05 / 3, 0.01):
        direct = next(d for d in range(1, 50) if scipy_stats.binomtest(d, d, 0.5).pvalue < threshold)
        assert mcnemar_min_items(threshold, 1000) == direct
    assert mcnemar_min_items(0.05, 5) is None  # 5 of 5 lost: p = 0.0625
    for n, tol in ((5, 1.0), (37, 10.0), (200, 2.5)):
        power = paired_power(n, 0.05, 2)
        needed = items_needed(power, tol)
        d = next(d for d in range(1, 50) if scipy_stats.binomtest(d, d, 0.5).pvalue < 0.025)  # Holm over 2
        brute = next(m for m in range(d, 10_000) if int(tol * m / 100) + 1 >= d)
        assert needed == brute and smallest_flagged(tol, brute) >= d
    assert items_needed(paired_power(10, 0.05, 1), 0.0) is None


def test_fisher_bound_against_direct_tests():
    k = fisher_min_items(0.05, 20, 20)
    table = lambda j: [[20, 0], [20 - j, j]]  # noqa: E731
    assert scipy_stats.fisher_exact(table(k)).pvalue < 0.05 <= scipy_stats.fisher_exact(table(k - 1)).pvalue


def test_unpaired_runs_are_refused_on_power_too(tmp_path, rf, capsys):
    base = rf.write_run(tmp_path / "b", [rf.Entry("m", "gsm8k", rf.samples([1.0] * 10))], with_samples=False)
    cand = rf.write_run(tmp_path / "c", [rf.Entry("m", "gsm8k", rf.samples([1.0] * 10))], with_samples=False)
    code, _, err = gate(capsys, base / "results.json", cand / "results.json")
    assert code == NOT_COMPARABLE and "10 items per side" in err and "needs n >=" in err


def speed_file(run, normalized: float, tps: float, cpu: str = "cpu-a") -> None:
    payload = {"format": FORMAT, "environment": {"cpu_model": cpu, "accelerator": None},
               "results": [{"model": "m", "task": "gsm8k", "samples": 2, "median_normalized": normalized,
                            "median_tokens_per_second": tps}]}
    (run / SPEED_FILE).write_text(json.dumps(payload))


def test_re_timed_speed_replaces_the_runs_own_tokens_per_second(tmp_path, rf, capsys):
    base = rf.write_run(tmp_path / "b", [rf.Entry("m", "gsm8k", rf.samples([0.0] * 5), tps_override=100.0)])
    cand = rf.write_run(tmp_path / "c", [rf.Entry("m", "gsm8k", rf.samples([0.0] * 5), tps_override=40.0)])
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == REGRESSION and "-60.0% (run, raw)" in out and "gate-speed" in out
    speed_file(base, 10.0, 50.0)
    speed_file(cand, 9.0, 30.0)  # the normalised figure moved 10%: within the default tolerance
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == PASS and "-10.0% (re-timed, normalised)" in out and "the tok/s columns are raw" in out
    speed_file(cand, 5.0, 25.0)  # a halving
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == REGRESSION and "SPEED" in out and "-50.0% (re-timed, normalised)" in out


def test_gate_speed_line_names_raw_and_normalised_figures():
    entry = {"model": "m", "task": "gsm8k", "median_tokens_per_second": 12.5, "median_normalized": 0.5,
             "normalized": [0.45, 0.5, 0.55], "reproduced": 2, "samples": 2}
    line = speed_line(entry, ResultEntry("m", "t", {}, 1, "m", {}, speed={"tokens_per_second": 20.0}, diagnostics={}))
    assert "raw 12.50 tok/s" in line and "the run's own 20.00" in line
    assert "normalised 0.500" in line and "what the gate compares" in line and "-10.0%..+10.0%" in line
    assert "the run's own" not in speed_line(entry, None)


def test_damaged_speed_file_exits_2(tmp_path, rf, capsys):
    base, cand = two_runs(tmp_path, rf, rf.samples([0.0] * 5), rf.samples([0.0] * 5))
    (cand / SPEED_FILE).write_text("{}")
    code, _, err = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == NOT_COMPARABLE and SPEED_FILE in err and "gate-speed" in err


def test_different_hardware_is_warned_about(tmp_path, rf, capsys):
    base, cand = two_runs(tmp_path, rf, rf.samples([0.0] * 5), rf.samples([0.0] * 5))
    for run, cpu in ((base, "AMD EPYC 7B13"), (cand, "Intel Xeon Platinum 8375C")):
        payload = json.loads((run / "results.json").read_text())
        payload["manifest"]["environment"].update({"cpu_model": cpu, "accelerator": None})
        (run / "results.json").write_text(json.dumps(payload))
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == PASS and "WARNING: baseline and candidate (the runs) ran on different hardware" in out
    assert "AMD EPYC 7B13" in out and "Intel Xeon Platinum 8375C" in out
    speed_file(base, 10.0, 50.0, cpu="AMD EPYC 7B13")
    speed_file(cand, 10.0, 50.0, cpu="AMD EPYC 7B13")
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY)
    assert "(the re-timings)" not in out  # the re-timings themselves ran on the same CPU model


def test_decoding_change_is_refused_unless_allowed(tmp_path, rf, capsys):
    base, cand = two_runs(tmp_path, rf, rf.samples([0.0] * 5), rf.samples([0.0] * 5),
                          cand_decoding={"do_sample": False, "seed": 1234, "threshold": 0.5})
    code, _, err = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == NOT_COMPARABLE and "decoding differ(s) (decoding: threshold null vs 0.5)" in err
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY, "--allow-decoding-change")
    assert code == PASS and "decoding changed (allowed): decoding: threshold null vs 0.5" in out


def test_not_comparable_names_the_differing_key_of_a_long_configuration(tmp_path, rf, capsys):
    """Two long configurations cut at one width look alike; the line must name the key that differs, and every
    differing field."""
    common = {f"option_{letter}": "a fairly long value" for letter in "abcdefgh"}
    base = rf.write_run(tmp_path / "base", [rf.Entry("m", "gsm8k", rf.samples([0.0] * 5))])
    entry = rf.Entry("m", "gsm8k", rf.samples([0.0] * 5))
    entry.decoding = {**common, "slot_size": 16}
    payload = json.loads((base / "results.json").read_text())
    payload["results"][0]["manifest"]["decoding"] = {**common, "slot_size": 8}
    (base / "results.json").write_text(json.dumps(payload))
    cand = rf.write_run(tmp_path / "cand", [entry])
    code, _, err = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == NOT_COMPARABLE and len(err.strip().splitlines()) == 1
    assert "decoding: slot_size 8 vs 16" in err and "option_a" not in err and "--allow-decoding-change" in err


def test_cpu_model_comes_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n")
    assert cpu_model(info) == "AMD EPYC 7B13 64-Core Processor"
    assert cpu_model(tmp_path / "absent")  # falls back to what platform knows


@pytest.mark.parametrize("decoding,expected", [({"do_sample": False, "temperature": 1.0}, True),
                                               ({"do_sample": True, "temperature": 0.7}, False),
                                               ({"temperature": 0.0, "slot_size": 8}, True),
                                               ({"temperature": 0.5}, False),
                                               ({"temperature": 0.0, "alg_temp": 0.1}, False)])
def test_deterministic_decoding(decoding, expected):
    assert is_deterministic(decoding) is expected


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


@pytest.mark.parametrize("case", ["missing", "passes", "bare", "no_samples", "no_such_model", "unregistered"])
def test_gate_speed_bad_input_exits_2_with_one_line(tmp_path, rf, capsys, case):
    from harness.gate.retiming import main_gate_speed

    run = rf.write_run(tmp_path / "r", [rf.Entry("m", "gsm8k", rf.samples([0.0] * 2))],
                       with_samples=case != "no_samples")
    bare = tmp_path / "bare.json"
    bare.write_text((run / "results.json").read_text())
    argv = {"missing": [str(tmp_path / "absent")], "passes": [str(run), "--passes", "0"], "bare": [str(bare)],
            "no_samples": [str(run)], "no_such_model": [str(run), "--models", "other"],
            "unregistered": [str(run)]}[case]  # model "m" is in no registry
    code = main_gate_speed(argv)
    out, err = capsys.readouterr()
    assert code == NOT_COMPARABLE and out == "" and len(err.strip().splitlines()) == 1 and "gate-speed: error" in err
    assert not (run / SPEED_FILE).exists()


def test_gate_speed_rebuilds_the_recorded_config_and_refuses_one_it_cannot():
    """The manifest's flat decoding record (nested Fast-dLLM config, canvas, run seed) back into the same config."""
    import torch

    from harness.gate.retiming import SpeedError, config_for_result
    from models.options import record
    from models.registry import load_adapter, spec_for

    adapter = load_adapter(spec_for("tiny-llada-fastdllm"), torch.device("cpu"), torch.float32)
    made = adapter.make_config({"threshold": 0.7, "seed": 7}, 32)
    decoding = json.loads(json.dumps(record(made), default=str))
    result = ResultEntry("tiny-llada-fastdllm", "gsm8k", {"decoding": decoding, "canvas_tokens": 32}, 0, "m", {},
                         speed={}, diagnostics={})
    assert config_for_result(adapter, result) == made
    renamed = replace(result, manifest={**result.manifest, "decoding": {**decoding, "renamed_option": 1}})
    with pytest.raises(SpeedError, match="renamed_option"):
        config_for_result(adapter, renamed)


def test_speed_across_schedules_or_implementations_is_noted(tmp_path, rf, capsys):
    base, cand = two_runs(tmp_path, rf, rf.samples([0.0] * 5), rf.samples([0.0] * 5))
    for run, schedule, network in ((base, "static", "transformers"), (cand, "continuous", "native")):
        payload = json.loads((run / "results.json").read_text())
        (result,) = payload["results"]
        result["speed"]["schedule"] = [schedule]
        result["manifest"]["implementation"] = {"network": network, "attention": "sdpa", "compiled": False}
        (run / "results.json").write_text(json.dumps(payload))
    code, out, _ = gate(capsys, base, cand, *NO_ACCURACY)
    assert code == PASS
    assert "m · gsm8k: schedule differs (['static'] vs ['continuous'])" in out
    assert "m · gsm8k: network implementation differs (transformers vs native)" in out


def repeated(rf, items: list[list[float]]) -> list[dict]:
    """Records of items with repeated samples: item i's sample k scored ``items[i][k]``."""
    out = []
    for doc, scores in enumerate(items):
        for k, record in enumerate(rf.samples(scores, doc_ids=[str(doc)] * len(scores), warmup=0)):
            out.append({**record, "key": f"key-{doc}-{k}", **({"sample": k} if k else {})})
    return out


def test_repeated_samples_pair_by_item_mean_with_a_clustered_bound(tmp_path, rf, capsys):
    base_items = [[1.0, 1.0, 1.0, 0.0] if i % 4 else [1.0] * 4 for i in range(80)]
    cand_items = [[0.0, 1.0, 0.0, 0.0] if i < 30 else scores for i, scores in enumerate(base_items)]
    base, cand = two_runs(tmp_path, rf, repeated(rf, base_items), repeated(rf, cand_items))
    code, out, err = gate(capsys, base, cand, "--max-accuracy-drop", "10")
    assert code == REGRESSION, err
    means = lambda items: [sum(s) / len(s) for s in items]  # noqa: E731
    p = scipy_stats.ttest_rel(means(cand_items), means(base_items)).pvalue
    row = next(line for line in out.splitlines() if "gsm8k" in line)
    assert f"{100 * sum(means(base_items)) / 80:.2f}" in row and f"{100 * sum(means(cand_items)) / 80:.2f}" in row
    assert f"paired t over items (repeated samples) {p:.2e}" in row and " 80 " in row and "0/320" in row
    # the bound: a z-test over 80 items' means, each side's spread together
    spread = (np.var(means(base_items), ddof=1) + np.var(means(cand_items), ddof=1)) ** 0.5
    bound = 100 * scipy_stats.norm.isf(0.05 / 2) * spread / 80 ** 0.5
    power = clustered_power(80, spread, 0.05, 1)
    assert power.min_drop_points == pytest.approx(bound) and f"{bound:.1f}" in row
    needed = items_needed(power, 3.0)
    assert clustered_power(needed, spread, 0.05, 1).detects(3.0)
    assert not clustered_power(needed - 1, spread, 0.05, 1).detects(3.0)
    code, _, err = gate(capsys, base, cand, "--max-accuracy-drop", "1")
    assert code == NOT_COMPARABLE and "underpowered: m · gsm8k: 80 paired items cannot detect a drop of 1" in err
    assert f"the smallest significant drop of the items' mean scores is {bound:.1f} points" in err
    assert f"it needs n >= {items_needed(power, 1.0)}" in err


def test_drift_names_the_sample_that_changed(tmp_path, rf, capsys):
    items = [[1.0, 0.0, 1.0]] * 4
    cand = repeated(rf, items)
    changed = next(r for r in cand if r["doc_id"] == "2" and r.get("sample") == 1)
    changed["token_ids"] = [7] + changed["token_ids"][1:]
    base, cand_run = two_runs(tmp_path, rf, repeated(rf, items), cand)
    code, out, _ = gate(capsys, base, cand_run, *NO_ACCURACY, "--max-changed-outputs", "0")
    assert code == REGRESSION and "1 of 12 outputs changed: doc 2 sample 1 at token 0" in out
