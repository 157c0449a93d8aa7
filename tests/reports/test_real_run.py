"""A real (tiny, offline) run through the runner, then its report and a self-comparison through the gate."""

from __future__ import annotations

import json

import pytest

from harness.gate.checks import PASS, main_gate
from reports.html import write_report


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from harness.run.runner import Runner, RunSettings

    output = tmp_path_factory.mktemp("tiny") / "run"
    settings = RunSettings(models=("tiny-qwen3",), tasks=("gsm8k",), output=output, limit=3, gen_length=8,
                           device="cpu", data="fixtures", progress=False)
    Runner(settings).run()
    return output


def test_report_from_a_real_run(tiny_run):
    path = write_report([tiny_run], tiny_run)
    html = path.read_text(encoding="utf-8")
    assert path == tiny_run / "report.html"
    assert "tiny-qwen3" in html and "gsm8k" in html and "fixture" in html  # the fixture-data warning
    payload = json.loads(html.split('<script type="application/json" id="sample-data">', 1)[1].split("</script>")[0])
    assert len(payload["items"]) == 3 and payload["items"][0]["outputs"][0]["tokens"] >= 1
    assert (tiny_run / "report_results.csv").read_text().count("tiny-qwen3") == 1


def test_gate_passes_a_run_against_itself(tiny_run, capsys):
    assert main_gate(["--baseline", str(tiny_run), "--candidate", str(tiny_run / "results.json"),
                      "--allow-underpowered"]) == PASS  # 3 items detect no drop; the point here is the plumbing
    out = capsys.readouterr().out
    assert "McNemar exact (paired)" in out and "gate: PASS" in out
