"""The README's CI recipe on real tiny runs (tiny-refusion, gsm8k fixtures): it can fail.

An identical rerun passes; a planted decoder regression fails on output drift, whether it comes as a changed
threshold (--model-arg, refused as a decoding change unless allowed) or as code that decodes differently under the
same configuration; a sample too small for an accuracy tolerance is refused on power. Timing is not asserted here
(speed is checked by benchmarks/gate_speed_noise.py); the re-timing's plumbing is.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.gate.checks import NOT_COMPARABLE, PASS, REGRESSION, main_gate
from harness.gate.retiming import main_gate_speed
from harness.run.folder import GATE_SPEED_NAME as SPEED_FILE

pytestmark = pytest.mark.slow  # four tiny runs and two re-timings: about a minute on a shared CPU
MODEL = "tiny-refusion"
RECIPE = ("--max-accuracy-drop", "100", "--max-changed-outputs", "0")  # accuracy of a random model means nothing


def tiny_run(output, model_args=None):
    from harness.run.runner import Runner, RunSettings

    Runner(RunSettings(models=(MODEL,), tasks=("gsm8k",), output=output, limit=3, gen_length=16, device="cpu",
                       data="fixtures", progress=False, model_args={MODEL: model_args or {}})).run()
    return output


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return tiny_run(tmp_path_factory.mktemp("recipe") / "baseline")


def gate(capsys, base, cand, *argv):
    code = main_gate(["--baseline", str(base), "--candidate", str(cand), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_identical_rerun_passes_with_re_timed_speed(baseline, tmp_path, capsys):
    rerun = tiny_run(tmp_path / "rerun")
    for run in (baseline, rerun):
        assert main_gate_speed([str(run), "--passes", "1", "--samples", "1"]) == 0
        assert "1/1 outputs reproduced" in capsys.readouterr().out
    timed = json.loads((rerun / SPEED_FILE).read_text())
    assert timed["environment"]["cpu_model"] and timed["results"][0]["clock"] == "process_cpu"
    manifest = json.loads((rerun / "results.json").read_text())["manifest"]["environment"]
    assert manifest["cpu_model"] and "accelerator" in manifest
    code, out, _ = gate(capsys, baseline, rerun, *RECIPE, "--max-tps-drop", "1")
    assert code == PASS, out
    assert "0/3" in out and "(re-timed, normalised)" in out and "accuracy not gated" in out


def test_threshold_change_fails_on_drift(baseline, tmp_path, capsys):
    planted = tiny_run(tmp_path / "planted", {"token_threshold": 0.0, "slot_threshold": 0.0})
    code, _, err = gate(capsys, baseline, planted, *RECIPE, "--max-tps-drop", "1")
    assert code == NOT_COMPARABLE and "decoding" in err  # a configuration change is not compared silently
    code, out, _ = gate(capsys, baseline, planted, *RECIPE, "--max-tps-drop", "1", "--allow-decoding-change")
    assert code == REGRESSION and "DRIFT" in out and "outputs changed" in out and "token_threshold" in out


def test_code_regression_under_the_same_configuration_fails_on_drift(baseline, tmp_path, capsys, monkeypatch):
    from models.adapters.refusion import RefusionAdapter
    from models.decoders.refusion.decoder import REFUSION

    def lowered(network, input_ids, attention_mask, config, **seeds):
        """A "refactor" that drops the thresholds; the manifest cannot tell."""
        config = dataclasses.replace(config, token_threshold=0.0, slot_threshold=0.0)
        return REFUSION.generate(network, input_ids, attention_mask, config, **seeds)

    monkeypatch.setattr(RefusionAdapter, "decoder", dataclasses.replace(REFUSION, generate=lowered))
    planted = tiny_run(tmp_path / "planted")
    monkeypatch.undo()
    code, out, _ = gate(capsys, baseline, planted, *RECIPE, "--max-tps-drop", "1")
    assert code == REGRESSION and "DRIFT" in out, out
    assert "drift: tiny-refusion · gsm8k:" in out and "at token" in out


def test_too_small_sample_is_refused_on_power(baseline, capsys):
    code, out, err = gate(capsys, baseline, baseline, "--max-changed-outputs", "0")  # default 1-point tolerance
    assert code == NOT_COMPARABLE and out == "" and len(err.strip().splitlines()) == 1
    assert f"underpowered: {MODEL} · gsm8k: 3 paired items" in err and "needs n >= 500" in err
