"""The families' published figures in the report: found by registry name, each cell with its source, and a visible
note wherever the source's benchmark is not the task measured here; the 2026 benchmarks under their task names."""

from __future__ import annotations

import pandas as pd
import pytest

from reports.html import write_report
from models.registry import MODELS
from reports.published import (COLUMNS, FAMILY_ROWS, PAPER_ROWS, TASK_COLUMNS, Figures, paper_column, paper_row,
                               published_row, published_table)
from tasks.registry import task_names

SDAR_REF = "JetLM/SDAR-8B-Chat"
TRADO_REF = "Gen-Verse/TraDo-8B-Instruct"


def family_run(rf, folder):
    """sdar-8b on MMLU-Pro (published: MMLU) and GSM8K, and trado-8b decoded with the static rule on MATH-500 (its
    published MATH500) and on the whole MATH test (which it does not publish)."""
    static = {"remasking": "low_confidence_static", "temperature": 0.0}
    return rf.write_run(folder, [
        rf.Entry("sdar-8b", "mmlu_pro", rf.samples([1.0, 0.0]), model_ref=SDAR_REF, kind="sdar"),
        rf.Entry("sdar-8b", "gsm8k", rf.samples([1.0, 1.0]), model_ref=SDAR_REF, kind="sdar"),
        rf.Entry("trado-8b", "math500", rf.samples([1.0, 0.0]), model_ref=TRADO_REF, kind="sdar", decoding=static),
        rf.Entry("trado-8b", "math", rf.samples([1.0, 0.0]), model_ref=TRADO_REF, kind="sdar", decoding=static),
    ])


def test_family_figures_sit_beside_the_measured_ones_with_their_notes(tmp_path, rf):
    html = write_report([family_run(rf, tmp_path / "run")], tmp_path / "out").read_text(encoding="utf-8")
    published = pd.read_csv(tmp_path / "out" / "report_published.csv").set_index(["model", "task"])
    mmlu, gsm8k = published.loc[("sdar-8b", "mmlu_pro")], published.loc[("sdar-8b", "gsm8k")]
    assert (mmlu["published row"], mmlu["published accuracy %"]) == ("SDAR-8B-Chat", pytest.approx(78.6))
    assert mmlu["published benchmark"] == "MMLU, not MMLU-Pro" and gsm8k["published benchmark"] == "same"
    assert mmlu["source"].startswith("SDAR paper (arXiv 2510.06303)") and pd.isna(mmlu["published tokens/s"])
    math500 = published.loc[("trado-8b", "math500")]  # the static row, since the run recorded the static rule
    assert (math500["published row"], math500["published accuracy %"]) == ("TraDo-8B-Instruct (static)",
                                                                           pytest.approx(78.5))
    assert math500["published benchmark"] == "same"
    assert ("trado-8b", "math") not in published.index  # TraDo's MATH500 is not a figure for the whole MATH test
    # The paper-style table: the published row under the measured one, its source and the note in the cell.
    assert "↳ SDAR-8B-Chat" in html and "↳ TraDo-8B-Instruct (static)" in html
    assert '<div class="bench-note">MMLU, not MMLU-Pro</div>' in html
    assert "MATH500, not the whole MATH test" not in html
    assert "SDAR paper (arXiv 2510.06303), Table 1" in html
    markdown = (tmp_path / "out" / "report_tables.md").read_text(encoding="utf-8")
    assert "MMLU, not MMLU-Pro" in markdown and "TraDo paper (arXiv 2509.06949)" in markdown


@pytest.mark.parametrize("manifest", [
    {"model": {"kind": "sdar", "name": "tiny-sdar"}, "model_ref": "tiny-sdar"},  # not a published checkpoint
    {"model": {"kind": "sdar", "name": "sdar-8b"}, "model_ref": "someone/SDAR-8B-Chat-fork"},  # another checkpoint
    {"model": {"kind": "ar", "name": "sdar-8b"}, "model_ref": SDAR_REF},  # another decoder kind
    {"model": {"kind": "sdar", "name": "trado-8b"}, "model_ref": TRADO_REF,
     "decoding": {"remasking": "entropy_bounded"}},  # a rule the paper has no figures for
])
def test_a_family_row_needs_the_name_checkpoint_kind_and_rule(manifest):
    assert paper_row(manifest) is None


def test_published_rows_name_registry_entries_as_declared():
    """The figures stay in reports/ (which reads results only, never models/), keyed by what a result records: each
    row's registry name, kind and checkpoint must be an entry's as its family declares it."""
    for name, rows in FAMILY_ROWS.items():
        assert all((row.kind, row.ref) == (MODELS[name].kind, MODELS[name].ref) for row in rows), name
    declared = {(spec.kind, spec.ref) for spec in MODELS.values()}
    assert set(PAPER_ROWS) <= declared


def test_every_family_row_has_a_source_and_marks_a_different_benchmark_by_name():
    """Where a source scored MMLU (SDAR, Fast-dLLM v2) or GPQA-diamond (DiffusionGemma) under our column, the cell
    says so; a note names what the source measured."""
    for rows in FAMILY_ROWS.values():
        for row in rows:
            cells = row.cells()
            assert row.source and cells
            for column, cell in cells.items():
                assert cell.note is None or cell.note.split(",")[0].split(";")[0].strip(), (row.label, column)
    assert FAMILY_ROWS["sdar-8b"][0].cells()["MMLU-Pro"].note.startswith("MMLU, not MMLU-Pro")
    assert FAMILY_ROWS["fastdllm-v2-7b"][0].cells()["MMLU-Pro"].note.startswith("MMLU, not MMLU-Pro")
    assert FAMILY_ROWS["diffusiongemma"][0].cells()["GPQA"].note == "GPQA-Diamond, not GPQA main"


def test_the_2026_benchmarks_sit_under_their_task_names_with_sources_and_notes(tmp_path, rf):
    """LLaDA2.0-mini on aime25 and livecodebench_v6 (the report's window not stated), Qwen3-8B on aime24 and
    livecodebench_v5 (another window): the ReFusion row gains the Qwen3 report's figures, each source named."""
    run = rf.write_run(tmp_path / "run", [
        rf.Entry("llada2-mini", "aime25", rf.samples([1.0, 0.0]), model_ref="inclusionAI/LLaDA2.0-mini",
                 kind="llada2"),
        rf.Entry("llada2-mini", "livecodebench_v6", rf.samples([0.0, 1.0]), model_ref="inclusionAI/LLaDA2.0-mini",
                 kind="llada2"),
        rf.Entry("qwen3", "aime24", rf.samples([1.0, 1.0]), model_ref="Qwen/Qwen3-8B"),
        rf.Entry("qwen3", "livecodebench_v5", rf.samples([0.0, 0.0]), model_ref="Qwen/Qwen3-8B"),
        rf.Entry("qwen3", "gsm8k", rf.samples([1.0, 0.0]), model_ref="Qwen/Qwen3-8B"),
    ])
    html = write_report([run], tmp_path / "out").read_text(encoding="utf-8")
    published = pd.read_csv(tmp_path / "out" / "report_published.csv").set_index(["model", "task"])
    aime25, lcb = published.loc[("llada2-mini", "aime25")], published.loc[("llada2-mini", "livecodebench_v6")]
    assert aime25["published accuracy %"] == pytest.approx(36.67) and lcb["published accuracy %"] == pytest.approx(31.5)
    assert lcb["published benchmark"].startswith("LiveCodeBench, window not stated")
    assert aime25["source"].startswith("LLaDA2.0 report (arXiv 2512.15745")
    aime24, lcb5 = published.loc[("qwen3", "aime24")], published.loc[("qwen3", "livecodebench_v5")]
    assert (aime24["published row"], aime24["published accuracy %"]) == ("Qwen3-8B", pytest.approx(29.1))
    assert aime24["published benchmark"] == "same" and lcb5["published accuracy %"] == pytest.approx(22.8)
    assert lcb5["published benchmark"] == "LiveCodeBench v5 window 2024-10 to 2025-02, not 2024-08 to 2025-02"
    assert published.loc[("qwen3", "gsm8k")]["published accuracy %"] == pytest.approx(81.96)  # the ReFusion table's
    assert "Qwen3 technical report (arXiv 2505.09388), Table 18" in aime24["source"]
    assert aime24["source"].startswith("ReFusion paper (arXiv 2512.13586)")
    assert "LiveCodeBench v5 window 2024-10 to 2025-02" in html


@pytest.mark.parametrize("task, column", [
    ("aime24", "aime24"), ("gpqa_diamond", "gpqa_diamond"), ("livecodebench", "livecodebench"),
    ("gpqa", "GPQA"), ("humaneval_plus", None), ("math500", "math500"), ("math", "MATH")])
def test_a_task_maps_to_its_published_column(rf, task, column):
    assert paper_column({"task": {"name": task, "paper_column": rf.paper_column(task)}}) == column


def test_every_2026_column_is_a_registry_task_and_every_figure_sits_in_a_known_column():
    rows = [row.cells() for rows in FAMILY_ROWS.values() for row in rows]
    rows += [published_row({"model": {"kind": "ar"}, "model_ref": "Qwen/Qwen3-8B"}).cells]
    assert set(TASK_COLUMNS) <= set(task_names())
    assert all(set(cells) <= {*COLUMNS, *TASK_COLUMNS} for cells in rows)
    # where a source scored GPQA-Diamond, the GPQA main column says so
    for name in ("llada2-mini", "llada2.1-mini", "diffusiongemma"):
        cells = FAMILY_ROWS[name][0].cells()
        assert cells["GPQA"].note.startswith("GPQA-Diamond, not GPQA main")
        assert cells["gpqa_diamond"].accuracy == cells["GPQA"].accuracy


def test_sdar_and_trado_math500_figures_sit_under_math500_not_math():
    """SDAR's Table 1 and TraDo's Table 2 report MATH500: those figures are the math500 task's, with no note, and
    no SDAR or TraDo row has a figure for the whole MATH test."""
    expected = {"sdar-8b": 78.6, "sdar-4b": 72.8}
    for name, accuracy in expected.items():
        cells = FAMILY_ROWS[name][0].cells()
        assert "MATH" not in cells and cells["math500"].accuracy == accuracy and cells["math500"].note is None
    trado = {row.label: row.cells() for row in FAMILY_ROWS["trado-8b"]}
    assert {label: cells["math500"].accuracy for label, cells in trado.items()} == {
        "TraDo-8B-Instruct (dynamic)": 75.5, "TraDo-8B-Instruct (static)": 78.5}
    assert all("MATH" not in cells and cells["math500"].note is None for cells in trado.values())
    assert not any("MATH500" in (cell.note or "") for rows in FAMILY_ROWS.values() for row in rows
                   for cell in row.cells().values())


def test_each_cell_records_the_samples_per_item_its_source_averaged():
    """One pass where the source decodes greedily (the ReFusion table, SDAR's Table 1, LLaDA2.0 at T 0), three for
    TraDo's Table 2 (SDAR's figures there too), the Qwen3 report's 64 on AIME and 10 on GPQA-Diamond, and unknown
    where the source does not say (Dream-Coder samples at T 0.1)."""
    refusion = published_table()
    assert {cell.samples for row in refusion.values() for cell in row.values()} == {1}
    sdar = FAMILY_ROWS["sdar-8b"][0].cells()
    assert (sdar["math500"].samples, sdar["ifeval"].samples, sdar["aime24"].samples) == (1, 1, 3)
    assert {cell.samples for row in FAMILY_ROWS["trado-8b"] for cell in row.cells().values()} == {3}
    assert FAMILY_ROWS["llada2-mini"][0].cells()["aime25"].samples == 1
    assert FAMILY_ROWS["fastdllm-v2-7b"][0].cells()["MATH"].samples == 1
    assert {cell.samples for cell in FAMILY_ROWS["dream-coder"][0].cells().values()} == {None}
    qwen3 = published_row({"model": {"kind": "ar"}, "model_ref": "Qwen/Qwen3-8B"}).cells
    assert {column: qwen3[column].samples for column in ("aime24", "aime25", "gpqa_diamond", "ifeval", "GSM8K")} == {
        "aime24": 64, "aime25": 64, "gpqa_diamond": 10, "ifeval": 1, "GSM8K": 1}


def test_samples_for_a_column_the_figures_lack_is_refused():
    with pytest.raises(ValueError, match="samples given for \\['aime24'\\]"):
        Figures("a source", "1.0", (("ifeval", None),), 1, (("aime24", 64),))
