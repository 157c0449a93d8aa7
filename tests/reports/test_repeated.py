"""Repeated samples per item (--samples K) in the report: the pass@k curve, the agreement table, K beside every
figure over K samples, and the note where a published figure's k is not the run's."""

from __future__ import annotations

import base64
import io
import json
import re
from html.parser import HTMLParser
from math import comb

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from reports import figures
from reports.browser import browser_payload
from reports.command import main_report
from reports.html import write_report
from reports.published import PublishedCell, PublishedRow
from reports.repeated import k_note, parse_repeated, table_ks
from reports.report_data import ReportError, gather


class Tables(HTMLParser):
    """Every table's rows as cell texts, with the classes and data-task of the elements around it."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self._open: list[tuple[str, dict]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            around = [a for _, a in self._open]
            self.tables.append({"classes": {c for a in around for c in (a.get("class") or "").split()}
                                | set((attrs.get("class") or "").split()),
                                "task": next((a["data-task"] for a in reversed(around) if "data-task" in a), None),
                                "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []
        if tag not in ("img", "br", "meta", "input"):
            self._open.append((tag, attrs))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1].append(" ".join(" ".join(self._cell).split()))
            self._cell = None
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def table(self, cls: str, task: str | None = None) -> list[list[str]]:
        return next(t["rows"] for t in self.tables if cls in t["classes"] and t["task"] == task)


def tables_of(html: str) -> Tables:
    parser = Tables()
    parser.feed(html)
    return parser


def expected_pass_at(k_max: int, correct: list[int]) -> list[float]:
    """pass@k in %, k = 1..K, by the unbiased estimator averaged over items."""
    return [100 * float(np.mean([1 - comb(k_max - c, k) / comb(k_max, k) for c in correct]))
            for k in range(1, k_max + 1)]


def by_model(rows: list[list[str]]) -> dict[str, list[str]]:
    return {row[0]: row for row in rows[1:]}


def test_pass_at_table_and_agreement_shares_are_the_runs(tmp_path, repeated_run, repeated):
    html = write_report([repeated_run], tmp_path / "out").read_text(encoding="utf-8")
    page = tables_of(html)
    assert 'id="repeated"' in html and '<h3 id="repeated-aime24">' in html and "repeated-gsm8k" not in html
    passes = page.table("pass-at", "aime24")
    assert passes[0] == ["model", "K", "pass@1 %", "pass@2 %", "pass@4 %"]
    rows = by_model(passes)
    assert set(rows) == {"a", "b"}  # "c" drew one sample per item: no curve, no row
    for model, (k, correct) in repeated.correct.items():
        curve = expected_pass_at(k, correct)
        shown = [f"{curve[j - 1]:.1f}" if j <= k else "-" for j in (1, 2, 4)]
        assert rows[model] == [model, str(k), *shown]
    assert rows["a"][2:] == ["35.0", "46.7", "60.0"]  # worked by hand: c = 4, 0, 2, 1, 0 of 4
    agreement = page.table("agreement", "aime24")
    assert agreement[0] == ["model", "K", "items", "all correct %", "all wrong %", "mixed %", "avg@K %",
                            "pass@K %", "maj@K %"]
    shares = by_model(agreement)
    for model, (k, correct) in repeated.correct.items():
        n = len(correct)
        expected = [100 * sum(c == k for c in correct) / n, 100 * sum(c == 0 for c in correct) / n,
                    100 * sum(0 < c < k for c in correct) / n, 100 * sum(correct) / (k * n),
                    100 * sum(c > 0 for c in correct) / n, 100 * sum(2 * c > k for c in correct) / n]
        assert shares[model] == [model, str(k), str(n), *(f"{v:.1f}" for v in expected)]
    assert shares["a"][3:6] == ["20.0", "40.0", "40.0"]


def test_curve_points_are_pass_at_every_k_and_drawn(repeated_run, repeated):
    data = gather([repeated_run])
    curves = figures.pass_at_curves(data)
    assert set(curves) == {"aime24"}
    chart = curves["aime24"]
    image = Image.open(io.BytesIO(base64.b64decode(chart.uri.split(",", 1)[1]))).convert("RGB")
    assert image.size == (chart.width, chart.height)
    for model, (k, correct) in repeated.correct.items():
        marks = [m for m in chart.marks if m.label == model]
        assert [m.value for m in marks] == pytest.approx(expected_pass_at(k, correct))
        assert all(a.x < b.x for a, b in zip(marks, marks[1:]))  # k = 1..K left to right
        for a, b in zip(marks, marks[1:]):  # higher pass@k, higher on the page (y grows downwards)
            assert (a.y - b.y) * (b.value - a.value) >= 0
        rgb = np.array([int(marks[0].colour[i:i + 2], 16) for i in (1, 3, 5)])
        for m in marks:  # each point's marker is drawn in its model's colour
            around = np.asarray(image.crop((round(m.x) - 2, round(m.y) - 2, round(m.x) + 3, round(m.y) + 3)))
            assert (np.abs(around.astype(int) - rgb).max(axis=2) <= 40).any(), (model, m)
    legend = [b.text for b in chart.texts]
    assert "a (K = 4, 5 items)" in legend and "b (K = 2, 5 items)" in legend


def test_k_is_said_beside_every_figure_over_k_samples(tmp_path, repeated_run):
    out = tmp_path / "out"
    html = write_report([repeated_run], out).read_text(encoding="utf-8")
    grid = by_model([[row[0].split()[0], *row[1:]] for row in tables_of(html).table("paper") if row])
    columns = tables_of(html).table("paper")[0]
    aime = columns.index("aime24")
    assert grid["a"][aime].startswith("35.00 avg@4 · maj@4 20.00 [") and "n=5×4" in grid["a"][aime]
    assert grid["b"][aime].startswith("60.00 avg@2 · maj@2 40.00 [") and "n=5×2" in grid["b"][aime]
    assert "avg@" not in grid["c"][aime] and "n=5" in grid["c"][aime]  # one sample per item: a plain score
    assert "avg@" not in grid["a"][columns.index("gsm8k")]
    assert "the mean over K samples per item" in html
    table = pd.read_csv(out / "report_table.csv")
    assert table.loc[table.model == "a", "aime24"].iloc[0].startswith("35.00 avg@4 [")
    assert ", maj@4 20.00 / " in table.loc[table.model == "a", "aime24"].iloc[0]
    assert not table.loc[table.model == "c", "aime24"].iloc[0].count("avg@")
    results = pd.read_csv(out / "report_results.csv")
    assert dict(zip(results.model + "/" + results.task, results.samples_per_item)) == \
        {"a/aime24": 4, "b/aime24": 2, "c/aime24": 1, "a/gsm8k": 1}
    passes = pd.read_csv(out / "report_pass_at_k.csv")
    assert len(passes) == 4 + 2
    assert passes.loc[(passes.model == "a") & (passes.k == 3), "pass_at_k_pct"].iloc[0] == pytest.approx(55.0)
    summary = pd.read_csv(out / "report_repeated.csv")
    assert list(summary.model) == ["a", "b"] and list(summary.K) == [4, 2]
    assert "## Repeated samples per item" in (out / "report_tables.md").read_text(encoding="utf-8")


PUBLISHED = PublishedRow("Paper X", "a paper", {"aime24": PublishedCell(30.0, samples=4),
                                                 "GSM8K": PublishedCell(80.0, samples=None)})


def test_published_figures_compare_only_at_the_same_k(tmp_path, repeated_run, monkeypatch):
    monkeypatch.setattr("reports.tables.published_row", lambda manifest: PUBLISHED)
    out = tmp_path / "out"
    html = write_report([repeated_run], out).read_text(encoding="utf-8")
    published = pd.read_csv(out / "report_published.csv")
    notes = dict(zip(published.model + "/" + published.task, published["samples per item"]))
    assert notes == {"a/aime24": "same (avg@4)", "b/aime24": "published avg@4, this run avg@2",
                     "c/aime24": "published avg@4, this run one pass", "a/gsm8k": "published k not stated"}
    rows = tables_of(html).table("paper")
    aime, gsm8k = rows[0].index("aime24"), rows[0].index("gsm8k")
    under = [rows[i + 1] for i, row in enumerate(rows) if row and row[0].split()[0] in ("a", "b", "c")]
    assert [r[0].startswith("↳ Paper X") for r in under] == [True, True, True]
    assert under[0][aime] == "30.00" and under[0][gsm8k] == "80.00 published k not stated"
    assert under[1][aime] == "30.00 published avg@4, this run avg@2"
    assert under[2][aime] == "30.00 published avg@4, this run one pass"
    assert under[2][gsm8k] == "80.00"  # "c" ran no gsm8k: nothing is compared, so nothing is noted


@pytest.mark.parametrize("measured, published, note", [
    (8, 64, "published avg@64, this run avg@8"), (8, 8, None), (1, 1, None), (1, None, "published k not stated"),
    (1, 64, "published avg@64, this run one pass"), (16, 1, "published one pass, this run avg@16"),
])
def test_k_note(measured, published, note):
    assert k_note(measured, published) == note


def test_table_ks():
    assert table_ks(1) == [1] and table_ks(4) == [1, 2, 4] and table_ks(6) == [1, 2, 4, 6]
    assert table_ks(64) == [1, 2, 4, 8, 16, 32, 64]


def test_a_long_curve_is_on_a_log_axis_with_whole_k(tmp_path, rf, repeated):
    run = repeated.write(tmp_path / "run")
    payload = json.loads((run / "results.json").read_text())
    correct = [64, 0, 5, 1, 32, 0]
    payload["results"][0]["repeated"] = repeated.block(64, correct)
    payload["results"][0]["manifest"]["samples"] = 64
    (run / "results.json").write_text(json.dumps(payload))
    chart = figures.pass_at_curves(gather([run]))["aime24"]
    marks = [m for m in chart.marks if m.label == "a"]
    assert [m.value for m in marks] == pytest.approx(expected_pass_at(64, correct))
    ticks = [b.text for b in chart.texts if b.text.isdigit()]
    assert {"1", "2", "4", "8", "16", "32", "64"} <= set(ticks) and "3" not in ticks
    assert marks[1].x - marks[0].x > marks[63].x - marks[62].x  # log2: k = 1 to 2 as wide as 32 to 64


def test_a_graded_metric_has_agreement_but_no_curve(tmp_path, repeated):
    run = repeated.write(tmp_path / "run")
    payload = json.loads((run / "results.json").read_text())
    for result in payload["results"]:
        if "repeated" in result:
            result["repeated"].update(pass_at=None, agreement=None, maj=None)
    (run / "results.json").write_text(json.dumps(payload))
    assert figures.pass_at_curves(gather([run])) == {}
    html = write_report([run], tmp_path / "out").read_text(encoding="utf-8")
    assert "No pass@k: the task's metric is graded" in html
    rows = by_model(tables_of(html).table("agreement", "aime24"))
    assert rows["a"] == ["a", "4", "5", "-", "-", "-", "35.0", "-", "-"]


def test_a_one_sample_report_says_nothing_of_k(tmp_path, rf):
    run = rf.write_run(tmp_path / "run", [rf.Entry("m", "gsm8k", rf.samples([1.0, 0.0]))])
    html = write_report([run], tmp_path / "out").read_text(encoding="utf-8")
    # "pass@1" is in the table's note whatever the run
    assert 'id="repeated"' not in html and not re.search(r"(avg|maj)@\d|pass@[2-9k]", html)
    assert "the mean over K samples per item" not in html
    assert not (tmp_path / "out" / "report_pass_at_k.csv").exists()


@pytest.mark.parametrize("change, message", [
    ({"pass_at": {"1": {"value": 0.5}, "3": {"value": 0.6}}}, "pass_at keys must be k = 1..4"),
    ({"samples_per_item": 0}, "samples_per_item must be a whole number"),
    ({"avg": 0.35}, "'repeated' avg is not an object"),
])
def test_a_broken_block_is_one_line_naming_the_result(tmp_path, repeated, capsys, change, message):
    run = repeated.write(tmp_path / "run")
    payload = json.loads((run / "results.json").read_text())
    payload["results"][0]["repeated"].update(change)
    (run / "results.json").write_text(json.dumps(payload))
    with pytest.raises(ReportError, match=f"a on aime24 in run: .*{message}"):
        gather([run])
    assert main_report([str(run), "--output", str(tmp_path / "out")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_parse_reads_the_block_as_written(repeated):
    block = parse_repeated(repeated.block(4, [4, 0, 2, 1, 0]))
    assert block is not None and block.samples_per_item == 4 and block.items == 5
    assert [round(e.value, 4) for e in block.pass_at] == [0.35, 0.4667, 0.55, 0.6]
    assert block.pass_at_k(5) is None and block.maj is not None and block.maj.value == pytest.approx(0.2)
    assert parse_repeated(None) is None


def test_the_sample_browser_names_each_sample_of_an_item(repeated_run):
    payload = browser_payload(gather([repeated_run]))
    item = next(i for i in payload["items"] if i["task"] == "aime24" and i["doc"] == "2")
    a, b, c = (payload["models"].index(name) for name in "abc")
    assert [(o["sample"], o["of"], o["ok"]) for o in item["outputs"] if o["m"] == a] == \
        [(0, 4, True), (1, 4, True), (2, 4, False), (3, 4, False)]  # item 2: 2 of its 4 samples right
    assert [o["sample"] for o in item["outputs"] if o["m"] == b] == [0, 1]
    assert [("of" in o, o["sample"]) for o in item["outputs"] if o["m"] == c] == [(False, 0)]
