"""The HTML report and its tables, from synthetic run folders in the runner's format."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pandas as pd
import pytest

from harness.run.folder import RunLoadError, load_run
from models.registry import MODELS
from reports.attribution_table import attribution_frame
from reports.browser import BrowserLimits, browser_payload, script_json
from reports.command import main_report
from reports.html import write_report
from reports.published import PUBLISHED_AVERAGE, paper_column, paper_row, published_table
from reports.report_data import ReportError, gather
from reports.tables import paper_grid
from tasks.registry import PAPER_TASKS, make_task

EVIL = '</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"><!-- <b>bold</b> & \u2028'


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def two_model_run(rf, folder, texts=None):
    a = [1.0, 1.0, 0.0, 1.0]
    b = [1.0, 0.0, 0.0, 0.0]
    entries = [
        rf.Entry("qwen3", "gsm8k", rf.samples(a, texts=texts), model_ref="Qwen/Qwen3-8B"),
        rf.Entry("qwen3", "mbpp", rf.samples([1.0, 1.0]), model_ref="Qwen/Qwen3-8B"),
        rf.Entry("refusion", "gsm8k", rf.samples(b, tokens=30, nfe=10), model_ref="GSAI-ML/ReFusion",
                 kind="refusion"),
        rf.Entry("refusion", "mbpp", rf.samples([0.0, 1.0], tokens=30, nfe=10), model_ref="GSAI-ML/ReFusion",
                 kind="refusion"),
    ]
    return rf.write_run(folder, entries)


def test_report_files_hold_the_same_numbers(tmp_path, rf):
    run = two_model_run(rf, tmp_path / "run")
    path = write_report([run], tmp_path / "out")
    assert path == tmp_path / "out" / "report.html"
    html = path.read_text(encoding="utf-8")
    results = pd.read_csv(tmp_path / "out" / "report_results.csv")
    assert len(results) == 4
    row = results[(results.model == "qwen3") & (results.task == "gsm8k")].iloc[0]
    assert row.accuracy_pct == pytest.approx(75.0) and row.n == 4
    assert row.ci95_low_pct < 75.0 < row.ci95_high_pct
    table = pd.read_csv(tmp_path / "out" / "report_table.csv")
    assert list(table.columns) == ["model", "gsm8k", "mbpp", "Avg."]
    # Avg. is the mean over tasks: qwen3 (75 + 100) / 2, refusion (25 + 50) / 2.
    assert table.loc[table.model == "qwen3", "Avg."].iloc[0].startswith("87.50")
    assert table.loc[table.model == "refusion", "Avg."].iloc[0].startswith("37.50")
    markdown = (tmp_path / "out" / "report_tables.md").read_text(encoding="utf-8")
    for text in ("87.50", "37.50", "| qwen3 |", "Published"):
        assert text in markdown
    for text in ("87.50", "37.50", "75.00", "baseline"):
        assert text in html
    # Published beside measured: both models map to paper rows, labelled as published.
    published = pd.read_csv(tmp_path / "out" / "report_published.csv")
    assert set(published["published row"]) == {"Qwen3-8B", "ReFusion"}
    assert published.loc[(published.model == "refusion") & (published.task == "gsm8k"),
                         "published accuracy %"].iloc[0] == pytest.approx(84.91)
    assert "published, not measured here" in html and "↳ ReFusion" in html


def test_report_is_self_contained(tmp_path, rf):
    html = write_report([two_model_run(rf, tmp_path / "run")], tmp_path / "out").read_text(encoding="utf-8")
    parser = Elements()
    parser.feed(html)
    for tag, attrs in parser.tags:
        for name in ("src", "href"):
            value = attrs.get(name)
            if value is not None:
                assert value.startswith(("data:", "#")), (tag, value)
        assert tag not in ("link", "iframe", "object", "embed")
    assert "@import" not in html and "url(" not in html
    assert sum(tag == "img" for tag, _ in parser.tags) >= 3  # tradeoff, accuracy, latency, forwards figures


def test_model_output_is_escaped(tmp_path, rf):
    texts = [EVIL, "fine", "<b>bold</b>", "plain"]
    run = two_model_run(rf, tmp_path / "run", texts=texts)
    html = write_report([run], tmp_path / "out").read_text(encoding="utf-8")
    parser = Elements()
    parser.feed(html)
    assert len(parser.scripts) == 2  # the sample data and the browser code; none from the model
    assert not any(tag == "img" and not (attrs.get("src") or "").startswith("data:") for tag, attrs in parser.tags)
    assert not any(tag == "b" for tag, _ in parser.tags)
    data = json.loads(parser.scripts[0])
    outputs = [o["text"] for item in data["items"] for o in item["outputs"]]
    assert EVIL in outputs and "<b>bold</b>" in outputs  # exact text round-trips
    assert "</script" not in parser.scripts[0] and "<!--" not in parser.scripts[0]


def test_script_json_cannot_break_out():
    text = str(script_json({"x": "</ScRiPt><script>alert(1)</script>", "nan": float("nan"), "u": "\ud800"}))
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text)["x"] == "</ScRiPt><script>alert(1)</script>"
    assert json.loads(text)["nan"] is None


def test_markup_in_model_names_is_escaped(tmp_path, rf):
    run = rf.write_run(tmp_path / "run", [rf.Entry("m<i>x</i>", "gsm8k", rf.samples([1.0, 0.0]))])
    html = write_report([run], tmp_path / "out").read_text(encoding="utf-8")
    assert "m&lt;i&gt;x&lt;/i&gt;" in html and "<i>" not in html


def test_incomparable_settings_are_warned_about(tmp_path, rf):
    a = rf.write_run(tmp_path / "a", [rf.Entry("qwen3", "gsm8k", rf.samples([1.0, 0.0]))])
    b = rf.write_run(tmp_path / "b", [rf.Entry("qwen3", "gsm8k", rf.samples([1.0, 1.0]), task_version="task-v2",
                                               decoding={"do_sample": True, "seed": 1})])
    data = gather([a, b])
    assert data.labels == ("qwen3 @ a", "qwen3 @ b")
    joined = " ".join(data.warnings)
    assert "task_version differs" in joined and "decoding differs" in joined
    html = write_report([a, b], tmp_path / "out").read_text(encoding="utf-8")
    assert 'class="warnings"' in html and "task_version differs" in html
    assert 'class="wrap col-task_version diff"' in html
    same = gather([a, rf.write_run(tmp_path / "c", [rf.Entry("other", "gsm8k", rf.samples([0.0, 1.0]))])])
    assert same.warnings == ()
    html = write_report([a, tmp_path / "c"], tmp_path / "out2").read_text(encoding="utf-8")
    assert 'class="warnings"' not in html


def test_fixture_data_is_flagged(tmp_path, rf):
    run = rf.write_run(tmp_path / "run", [rf.Entry("m", "gsm8k", rf.samples([1.0]), data_source="fixtures")])
    assert any("fixture" in w for w in gather([run]).warnings)


def test_baseline_choice(tmp_path, rf):
    run = two_model_run(rf, tmp_path / "run")
    assert gather([run]).baseline == "qwen3"  # the autoregressive model by default
    assert gather([run], "refusion").baseline == "refusion"
    with pytest.raises(ReportError, match="not in the runs"):
        gather([run], "llama3")


def test_sample_browser_keeps_disagreements_under_the_cap(tmp_path, rf):
    a = [1.0] * 10
    b = [1.0] * 7 + [0.0] * 3  # docs 7, 8, 9 disagree
    run = rf.write_run(tmp_path / "run", [rf.Entry("x", "gsm8k", rf.samples(a)), rf.Entry("y", "gsm8k", rf.samples(b))])
    payload = browser_payload(gather([run]), BrowserLimits(items_per_task=4, chars=10))
    docs = [item["doc"] for item in payload["items"]]
    assert docs == ["0", "7", "8", "9"]  # all disagreements, then the first others, in document order
    assert payload["counts"]["gsm8k"] == {"total": 10, "shown": 4, "disagree": 3}
    assert all(len(item["outputs"]) == 2 for item in payload["items"])
    assert payload["items"][1]["outputs"][0]["text"].startswith("The answer")
    assert "more characters not shown" in payload["items"][1]["outputs"][0]["text"]


def test_a_bare_results_file_reports_without_samples(tmp_path, rf):
    run = rf.write_run(tmp_path / "run", [rf.Entry("m", "gsm8k", rf.samples([1.0, 0.0]))], with_samples=False)
    html = write_report([run / "results.json"], tmp_path / "out").read_text(encoding="utf-8")
    assert "carry no sample records" in html and 'id="sample-data"' not in html


def test_published_table_matches_its_own_averages():
    """The transcription check: each row's seven cells average to the paper's Avg. column."""
    for row, cells in published_table().items():
        accuracy = sum(c.accuracy for c in cells.values()) / len(cells)
        tps = sum(c.tokens_per_second for c in cells.values()) / len(cells)
        assert accuracy == pytest.approx(PUBLISHED_AVERAGE[row][0], abs=0.011), row
        assert tps == pytest.approx(PUBLISHED_AVERAGE[row][1], abs=0.011), row


# Every registry model whose checkpoint and decoder are the paper's, and the row it is shown beside; the rest none.
PAPER_ROW_OF = {"qwen3": "Qwen3-8B", "llama3": "Llama-3-8B-Instruct", "refusion": "ReFusion",
                "llada": "LLaDA-8B-Instruct", "dream": "Dream-7B-Instruct",
                "llada-fastdllm": "LLaDA w/ Fast-dLLM", "dream-fastdllm": "Dream w/ Fast-dLLM"}
# Registry entries with a row of their own family's published figures, found by name (at their default decoding).
FAMILY_ROW_OF = {"sdar-8b": "SDAR-8B-Chat", "sdar-4b": "SDAR-4B-Chat", "trado-8b": "TraDo-8B-Instruct (dynamic)",
                 "fastdllm-v2-7b": "Fast-dLLM v2 7B", "fastdllm-v2-1.5b": "Fast-dLLM v2 1.5B",
                 "diffusiongemma": "DiffusionGemma 26B-A4B-it", "llada2-mini": "LLaDA2.0-mini",
                 "llada2.1-mini": "LLaDA2.1-mini (S mode)", "dream-coder": "Dream-Coder-7B-Instruct"}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_paper_rows_come_from_the_recorded_kind_and_checkpoint(name):
    spec = MODELS[name]
    assert paper_row({"model": {"kind": spec.kind}, "model_ref": spec.ref}) == PAPER_ROW_OF.get(name)
    named = {"model": {"kind": spec.kind, "name": name}, "model_ref": spec.ref, "decoding": spec.defaults}
    assert paper_row(named) == PAPER_ROW_OF.get(name, FAMILY_ROW_OF.get(name))


@pytest.mark.parametrize("kind, ref", [
    ("ar", "tiny-qwen3"), ("llada", "tiny-llada"), ("ar", "gpt2"), ("ar", "someone/fast-qwen3-8b"),
    ("refusion", "my/refusion-fork"), ("llada", "Dream-org/Dream-v0-Instruct-7B"), (None, "GSAI-ML/ReFusion"),
])
def test_names_alone_map_to_no_paper_row(kind, ref):
    """No substring guessing: a checkpoint is the paper's only under the paper's decoder kind."""
    assert paper_row({"model": {"kind": kind}, "model_ref": ref}) is None


def test_paper_columns_are_the_tasks_own():
    columns = {name: make_task(name).describe()["paper_column"] for name in PAPER_TASKS}
    assert columns == {"mmlu_pro": "MMLU-Pro", "arc_challenge": "ARC-C", "gsm8k": "GSM8K", "math": "MATH",
                       "gpqa": "GPQA", "humaneval": "HumanEval", "mbpp": "MBPP"}
    assert all(paper_column({"task": {"paper_column": c}}) == c for c in columns.values())
    assert paper_column({"task": {"name": "gsm8k_cot"}}) is None  # a result that records no column has none
    assert paper_column({"task": {"paper_column": "GSM8K-v2"}}) is None  # only the table's own columns


def test_paper_grid_orders_tasks_like_the_paper(tmp_path, rf):
    run = rf.write_run(tmp_path / "run", [rf.Entry("m", t, rf.samples([1.0])) for t in ("mbpp", "custom", "gsm8k")])
    data = gather([run])
    assert data.tasks == ("gsm8k", "mbpp", "custom")
    assert paper_grid(data)[0].tasks_in_average == 3


def test_cli_writes_the_report(tmp_path, rf, capsys):
    run = two_model_run(rf, tmp_path / "run")
    assert main_report([str(run), "--baseline", "refusion"]) == 0
    assert (run / "report.html").is_file() and "report.html" in capsys.readouterr().out
    assert main_report([str(run), str(run), "--output", str(tmp_path / "both")]) == 0
    assert "qwen3 @ run#1" in (tmp_path / "both" / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("argv", [["nowhere"], ["RUN", "--baseline", "nobody"], ["RUN", "--max-items", "-1"], []])
def test_cli_bad_input_is_one_line(tmp_path, rf, capsys, argv):
    run = two_model_run(rf, tmp_path / "run")
    argv = [str(run) if a == "RUN" else str(tmp_path / a) if a == "nowhere" else a for a in argv]
    assert main_report(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1


def test_load_run_rejects_broken_sample_records(tmp_path, rf):
    run = rf.write_run(tmp_path / "run", [rf.Entry("m", "gsm8k", rf.samples([1.0]))])
    (run / "samples" / "m" / "gsm8k.jsonl").write_text("{broken\n")
    with pytest.raises(RunLoadError, match="line 1"):
        gather([run])
    assert load_run(run).results[0].model == "m"


def test_missing_speed_and_scores_still_render(tmp_path, rf):
    """A rescored run has no peak memory, a run of one sample has no stderr: the report shows dashes."""
    run = rf.write_run(tmp_path / "run", [rf.Entry("a", "gsm8k", rf.samples([1.0], warmup=1)),
                                          rf.Entry("b", "gsm8k", rf.samples([0.0], warmup=1))], with_samples=False)
    payload = json.loads((run / "results.json").read_text())
    for result in payload["results"]:
        result["speed"].update({"tokens_per_second": None, "tokens_per_forward": None})
        result["metrics"][result["primary_metric"]]["stderr"] = float("nan")
    (run / "results.json").write_text(json.dumps(payload))
    html = write_report([run], tmp_path / "out").read_text(encoding="utf-8")
    text = re.sub(r'src="data:[^"]*"', "", html)
    assert "nan" not in re.sub(r"[^a-z]+", " ", text.lower()).split()
    assert "Needs at least two models" in html  # no speed, so no scatter point


def test_attribution_is_read_from_each_runs_results_not_recomputed(tmp_path, rf):
    """The attribution table shows what results.json says, with the report's labels; a baseline in another run is
    not paired with a model."""
    ar, fast = rf.Entry("ar", "gsm8k", rf.samples([1.0] * 4)), rf.Entry("fast", "gsm8k", rf.samples([1.0] * 4,
                                                                                                   latency=0.25))
    fast.kind = "llada"
    run = rf.write_run(tmp_path / "run", [ar, fast])
    payload = json.loads((run / "results.json").read_text())
    assert [(a["model"], a["baseline"], round(a["speed_ratio"], 6)) for a in payload["attribution"]] == \
        [("fast", "ar", 2.0)]
    payload["attribution"][0]["speed_ratio"] = 7.5
    (run / "results.json").write_text(json.dumps(payload))
    assert list(attribution_frame(gather([run]))["speed ×"]) == [7.5]
    apart = [rf.write_run(tmp_path / "a", [ar]), rf.write_run(tmp_path / "b", [fast])]
    assert attribution_frame(gather(apart)).empty
