"""One offline run over all seven tasks: results, sample records and the report, as the README promises."""

from __future__ import annotations

import json
import os
import stat

from harness.cli import main
from reports import html
from reports.html import write_report
from tasks.registry import PAPER_TASKS


def test_all_seven_tasks_run_offline_and_report(tmp_path, capsys, monkeypatch):
    built = []
    monkeypatch.setattr(html, "write_report", lambda *args: built.append(args) or write_report(*args))
    old_mask = os.umask(0o022)  # a shared runs folder: what the run writes must be readable by the group
    try:
        status = main(["--models", "tiny-qwen3", "--tasks", "all", "--limit", "3", "--data", "fixtures",
                       "--gen-length", "32", "--output", str(tmp_path), "--no-progress"])
    finally:
        os.umask(old_mask)
    assert status == 0
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())["results"]
    assert [r["task"] for r in results] == list(PAPER_TASKS)
    for result in results:
        assert result["task"] in out
        assert result["n_samples"] == 3 and result["primary_metric"] in result["metrics"]
        assert result["speed"]["token_definition"] == "generated_until_eos"
        assert result["speed"]["timed_samples"] == 2 and result["speed"]["warmup_samples"] == 1
        lines = (tmp_path / "samples" / "tiny-qwen3" / f"{result['task']}.jsonl").read_text().splitlines()
        assert len(lines) == 3 and all("scores" in json.loads(line) for line in lines)
    code = {r["task"]: r["diagnostics"]["exec_status_counts"] for r in results if r["task"] in ("humaneval", "mbpp")}
    assert all(sum(counts.values()) == 3 for counts in code.values())
    assert (tmp_path / "report.html").stat().st_size > 10_000
    assert len(built) == 1 and f"report: {tmp_path / 'report.html'}" in out  # once, at the end, not after every job
    written = [tmp_path / "results.json", tmp_path / "report.html", *(tmp_path / "samples").rglob("*.jsonl")]
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o644}
