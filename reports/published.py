"""Published figures: the ReFusion paper's Table 1 (arXiv 2512.13586), and each other family's own paper, report,
README or model card, with which results map onto their rows and columns.

These are the authors' figures on their hardware; the report shows them beside measured numbers, labelled as such.
A ReFusion row is found by the decoder kind and checkpoint a result records; a family row by the registry name, and
only when the recorded kind, checkpoint and (TraDo) remasking rule are the row's. Columns are the ReFusion table's
seven, then the 2026 benchmarks under their task names. A cell whose benchmark is not the harness's task (MMLU
beside MMLU-Pro, another LiveCodeBench window, GPQA-Diamond beside GPQA main) carries a note that the report shows
with it; a row whose figures come from several sources names each, with the columns it gave. Each cell records how
many samples per item its source averaged (``samples``: 1 for one pass, None where the source does not say), so a
measured avg@K is set beside a published avg@k only where K is k.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCE = "ReFusion paper (arXiv 2512.13586), Table 1: zero-shot, chat template, batch 1, authors' GPU"
COLUMNS = ("MMLU-Pro", "ARC-C", "GSM8K", "MATH", "GPQA", "HumanEval", "MBPP")
# The 2026 benchmarks (docs/tasks.md) have no column in the ReFusion table: their figures sit under the task's name.
TASK_COLUMNS = ("livecodebench", "livecodebench_v5", "livecodebench_v6", "math500", "aime24", "aime25", "ifeval",
                "gpqa_diamond", "bbh")

# row -> column -> (accuracy %, tokens/s); transcribed from the ReFusion paper (arXiv 2512.13586), Table 1.
_TABLE = {
    "Llama-3-8B-Instruct": "35.23/32.07 82.76/44.12 75.13/42.81 25.48/19.73 29.46/42.00 46.34/42.26 53.00/41.68",
    "Qwen3-8B": "67.25/31.42 90.36/42.78 81.96/31.20 83.28/30.11 39.06/30.43 87.80/30.95 63.80/30.07",
    "LLaDA-8B-Instruct": "35.80/18.21 85.58/0.03 76.35/27.35 38.78/23.93 32.37/1.99 45.12/12.42 25.60/2.97",
    "LLaDA w/ Fast-dLLM": "35.02/39.81 82.85/0.86 76.27/73.07 38.58/52.23 28.35/17.54 37.80/62.52 24.80/37.19",
    "LLaDA w/ D2F": "22.84/44.54 84.13/3.70 39.04/82.59 23.68/59.48 31.25/23.84 36.59/96.90 35.20/53.85",
    "Dream-7B-Instruct": "40.05/15.98 88.31/0.06 76.42/20.30 46.60/18.99 30.36/1.81 56.71/3.51 50.40/1.23",
    "Dream w/ Fast-dLLM": "40.36/47.18 86.86/1.42 75.82/61.49 36.76/58.24 31.25/22.96 56.10/49.73 10.60/19.55",
    "Dream w/ D2F": "23.82/56.43 85.92/59.08 41.62/79.20 29.98/84.14 30.13/49.96 50.00/69.15 51.60/65.59",
    "ReFusion": "45.94/52.74 89.76/32.46 84.91/81.24 54.22/81.77 35.49/64.11 78.66/103.90 68.20/92.09",
}
# The paper's own "Avg." column, kept to check the transcription (the mean of the seven cells).
PUBLISHED_AVERAGE = {
    "Llama-3-8B-Instruct": (49.63, 37.81), "Qwen3-8B": (73.36, 32.42), "LLaDA-8B-Instruct": (48.51, 12.41),
    "LLaDA w/ Fast-dLLM": (46.24, 40.46), "LLaDA w/ D2F": (38.96, 52.13), "Dream-7B-Instruct": (55.55, 8.84),
    "Dream w/ Fast-dLLM": (48.25, 37.22), "Dream w/ D2F": (44.72, 66.22), "ReFusion": (65.31, 72.62),
}


@dataclass(frozen=True)
class PublishedCell:
    accuracy: float  # percent
    tokens_per_second: float | None = None  # None where the source gives no speed
    note: str | None = None  # where the published benchmark differs from the harness's task
    samples: int | None = None  # samples per item the source averaged (1: one pass); None: the source does not say


def published_table() -> dict[str, dict[str, PublishedCell]]:
    """Row name -> column name -> published cell. The ReFusion table is one greedy pass per item."""
    table = {}
    for row, text in _TABLE.items():
        cells = [PublishedCell(*map(float, pair.split("/")), samples=1) for pair in text.split()]
        table[row] = dict(zip(COLUMNS, cells))
    return table


# What a run records (its manifest's decoder kind and checkpoint) -> the paper's row. Explicit, so a model is shown
# beside published figures only when it is the paper's checkpoint under the paper's decoder; the D2F rows have no
# decoder here and stay in the reference table only.
PAPER_ROWS = {
    ("ar", "Qwen/Qwen3-8B"): "Qwen3-8B",
    ("ar", "meta-llama/Meta-Llama-3-8B-Instruct"): "Llama-3-8B-Instruct",
    ("refusion", "GSAI-ML/ReFusion"): "ReFusion",
    ("llada", "GSAI-ML/LLaDA-8B-Instruct"): "LLaDA-8B-Instruct",
    ("llada-fastdllm", "GSAI-ML/LLaDA-8B-Instruct"): "LLaDA w/ Fast-dLLM",
    ("dream", "Dream-org/Dream-v0-Instruct-7B"): "Dream-7B-Instruct",
    ("dream-fastdllm", "Dream-org/Dream-v0-Instruct-7B"): "Dream w/ Fast-dLLM",
}


@dataclass(frozen=True)
class PublishedRow:
    """One published row as the report shows it: its label, where it comes from, and its cells by column."""

    label: str
    source: str
    cells: dict[str, PublishedCell]


@dataclass(frozen=True)
class Figures:
    """One source's figures for a row: one accuracy % per (column, note) of ``layout``; a note says where the
    source's benchmark is not the task here, or what else the source reports for it. ``samples`` is the samples per
    item the source averaged for every column (None: not stated), ``samples_by_column`` the columns where it differs
    (Qwen3's report: AIME over 64, GPQA-Diamond over 10)."""

    source: str
    scores: str
    layout: tuple[tuple[str, str | None], ...]
    samples: int | None = None
    samples_by_column: tuple[tuple[str, int | None], ...] = ()

    def __post_init__(self) -> None:
        unknown = {column for column, _ in self.samples_by_column} - {column for column, _ in self.layout}
        if unknown:
            raise ValueError(f"{self.source}: samples given for {sorted(unknown)}, which the layout does not have")

    def cells(self) -> dict[str, PublishedCell]:
        values = zip(self.layout, self.scores.split(), strict=True)
        samples = dict(self.samples_by_column)
        return {column: PublishedCell(float(score), note=note, samples=samples.get(column, self.samples))
                for (column, note), score in values}


def merged_cells(figures: tuple[Figures, ...]) -> dict[str, PublishedCell]:
    return {column: cell for f in figures for column, cell in f.cells().items()}


def sources_text(first: str, more: tuple[Figures, ...]) -> str:
    """The row's source, then each further source with the columns it gave."""
    return "; ".join([first, *(f"{', '.join(c for c, _ in f.layout)}: {f.source}" for f in more)])


@dataclass(frozen=True)
class FamilyRow:
    """A model's figures in its own paper or README, shown beside the registry entries named in ``FAMILY_ROWS``."""

    label: str
    kind: str  # the adapter kind the result must record
    ref: str  # the checkpoint it must record
    figures: tuple[Figures, ...]  # the main source first
    decoding: tuple[tuple[str, Any], ...] = ()  # decoding options the result must record (TraDo: the rule)

    @property
    def source(self) -> str:
        return sources_text(self.figures[0].source, self.figures[1:])

    def cells(self) -> dict[str, PublishedCell]:
        return merged_cells(self.figures)


SDAR_SOURCE = "SDAR paper (arXiv 2510.06303), Table 1 (the README's assets/table1.png)"
TRADO_SOURCE = "TraDo paper (arXiv 2509.06949), Table 2 (the dLLM-RL README's assets/maintable.png)"
FASTDLLM_V2_SOURCE = "Fast-dLLM v2 README (NVlabs/Fast-dLLM, v2/)"
DIFFUSIONGEMMA_SOURCE = "DiffusionGemma model card figures, as quoted by secondary sources"
LLADA2_SOURCE = ("LLaDA2.0 report (arXiv 2512.15745; tech_report.pdf in inclusionAI/LLaDA2.X), Table 1 (T 0, block "
                 "32, threshold 0.95); Qwen3-8B (no think) from the same table")
LLADA21_SOURCE = ("LLaDA2.1 report (arXiv 2602.08676; llada2_1_tech_report.pdf in inclusionAI/LLaDA2.X), Table 2: S "
                  "mode shown, Q mode in the notes (the harness edits with diffusers' example settings, not the "
                  "report's S or Q); HumanEval+ 80.49 / 82.93 and MBPP+ 73.28 / 74.07 (S / Q) are not shown")
QWEN3_SOURCE = ("Qwen3 technical report (arXiv 2505.09388), Table 18, non-thinking: sampled (T 0.7, top-p 0.8, top-k "
                "20, presence penalty 1.5, up to 32,768 new tokens), AIME the mean of 64 samples, GPQA-Diamond of 10")
DREAM_CODER_SOURCE = ("Dream-Coder README (DreamLM/Dream-Coder, assets/results.png; arXiv 2509.01142); its "
                      "instruct/code_eval README: T 0.1, entropy, evalplus at 512 tokens, LiveCodeBench at 768")
_QWEN3_IN_LLADA2 = "Qwen3-8B (no think) in the same table: {}"
_GPQA_DIAMOND = "GPQA-Diamond, not GPQA main"
_LCB_V2 = "LiveCodeBench-v2 (release_v2), not release_v6"
_LLADA2_LAYOUT = tuple((column, "; ".join(filter(None, (differs, _QWEN3_IN_LLADA2.format(qwen3)))))
                       for column, differs, qwen3 in (
    ("MMLU-Pro", None, "65.48"), ("ARC-C", None, "93.35"), ("GPQA", _GPQA_DIAMOND, "46.59"), ("GSM8K", None, "93.63"),
    ("MATH", None, "86.28"), ("HumanEval", None, "84.76"), ("MBPP", None, "78.92"), ("gpqa_diamond", None, "46.59"),
    ("bbh", "BIG-Bench Hard, prompt and shots not stated", "79.48"), ("aime25", None, "22.08"),
    ("ifeval", None, "86.90"),
    ("livecodebench_v6", "LiveCodeBench, window not stated (v6 in the report's Figure 1)", "26.38")))
_LLADA21_LAYOUT = (
    ("MMLU-Pro", "Q mode: 64.84"), ("GPQA", f"{_GPQA_DIAMOND}; Q mode: 53.28"), ("gpqa_diamond", "Q mode: 53.28"),
    ("bbh", "BIG-Bench Hard, prompt and shots not stated; Q mode: 80.58"), ("aime25", "Q mode: 43.33"),
    ("ifeval", "Q mode: 83.18"),
    ("livecodebench_v6", "LiveCodeBench, version and window not stated; Q mode: 30.40"))
_MMLU = "MMLU, not MMLU-Pro"
# SDAR's and TraDo's "MATH500" is MATH-500, the task math500: their figures sit there, not under the whole MATH test.
_SDAR_LAYOUT = (("MMLU-Pro", _MMLU), ("GSM8K", None), ("math500", None), ("HumanEval", None), ("MBPP", None),
                ("ifeval", "IFEval, which of its four figures not stated"))
_TRADO_LAYOUT = (("GSM8K", None), ("math500", None), ("aime24", None), ("livecodebench", _LCB_V2))
_SDAR_IN_TRADO_LAYOUT = (("aime24", None), ("livecodebench", _LCB_V2))
_SDAR_IN_TRADO = f"{TRADO_SOURCE}, static rule, by TraDo's sampled evaluation"
_FASTDLLM_V2_LAYOUT = (("HumanEval", None), ("MBPP", None), ("GSM8K", None), ("MATH", None),
                       ("MMLU-Pro", "MMLU, not MMLU-Pro, and scored by log-likelihood, not generated"), ("GPQA", None))
_FASTDLLM_V2_7B_LAYOUT = (("HumanEval", "HumanEval; HumanEval+ is 58.5"), ("MBPP", "MBPP; MBPP+ is 52.3"),
                          *_FASTDLLM_V2_LAYOUT[2:])
# Samples per item each source averaged. Greedy sources are one pass: SDAR's Table 1 (top-k 1), the LLaDA2.0 and
# LLaDA2.1 reports (T 0), Fast-dLLM v2's README (greedy). TraDo's Table 2 averages three sampled answers per item
# (trado_eval.yaml, T 1; docs/decoders.md), SDAR's figures there included. Dream-Coder samples (T 0.1) and the
# DiffusionGemma quotes do not say how often: None, the default.
_ONE_PASS = 1
_TRADO_SAMPLES = 3
# The Qwen3 report's non-thinking figures: AIME the mean of 64 samples, GPQA-Diamond of 10, the rest one pass.
_QWEN3_SAMPLES = (("aime24", 64), ("aime25", 64), ("gpqa_diamond", 10))
_STATIC = (("remasking", "low_confidence_static"),)
_DYNAMIC = (("remasking", "low_confidence_dynamic"),)

# registry name -> its published rows (the first whose recorded decoding matches is shown).
FAMILY_ROWS: dict[str, tuple[FamilyRow, ...]] = {
    "sdar-8b": (FamilyRow("SDAR-8B-Chat", "sdar", "JetLM/SDAR-8B-Chat", (
        Figures(SDAR_SOURCE, "78.6 91.3 78.6 78.7 72.0 61.4", _SDAR_LAYOUT, _ONE_PASS),
        Figures(_SDAR_IN_TRADO, "11.8 18.5", _SDAR_IN_TRADO_LAYOUT, _TRADO_SAMPLES))),),
    "sdar-4b": (FamilyRow("SDAR-4B-Chat", "sdar", "JetLM/SDAR-4B-Chat", (
        Figures(SDAR_SOURCE, "74.9 89.9 72.8 72.0 65.4 56.6", _SDAR_LAYOUT, _ONE_PASS),
        Figures(_SDAR_IN_TRADO, "5.0 15.6", _SDAR_IN_TRADO_LAYOUT, _TRADO_SAMPLES))),),
    "trado-8b": (
        FamilyRow("TraDo-8B-Instruct (dynamic)", "sdar", "Gen-Verse/TraDo-8B-Instruct",
                  (Figures(TRADO_SOURCE, "91.2 75.5 11.0 22.4", _TRADO_LAYOUT, _TRADO_SAMPLES),), _DYNAMIC),
        FamilyRow("TraDo-8B-Instruct (static)", "sdar", "Gen-Verse/TraDo-8B-Instruct",
                  (Figures(TRADO_SOURCE, "92.3 78.5 13.3 25.9", _TRADO_LAYOUT, _TRADO_SAMPLES),), _STATIC),
    ),
    "fastdllm-v2-7b": (FamilyRow("Fast-dLLM v2 7B", "fastdllm-v2", "Efficient-Large-Model/Fast_dLLM_v2_7B", (
        Figures(FASTDLLM_V2_SOURCE, "63.4 63.0 83.7 61.6 66.6 31.9", _FASTDLLM_V2_7B_LAYOUT, _ONE_PASS),)),),
    "fastdllm-v2-1.5b": (FamilyRow("Fast-dLLM v2 1.5B", "fastdllm-v2", "Efficient-Large-Model/Fast_dLLM_v2_1.5B", (
        Figures(FASTDLLM_V2_SOURCE, "43.9 50.0 62.0 38.1 55.1 27.7", _FASTDLLM_V2_LAYOUT, _ONE_PASS),)),),
    "llada2-mini": (FamilyRow("LLaDA2.0-mini", "llada2", "inclusionAI/LLaDA2.0-mini", (
        Figures(LLADA2_SOURCE, "63.22 93.56 47.98 94.24 93.22 86.59 81.50 47.98 78.21 36.67 80.78 31.50",
                _LLADA2_LAYOUT, _ONE_PASS),)),),
    "llada2.1-mini": (FamilyRow("LLaDA2.1-mini (S mode)", "llada2", "inclusionAI/LLaDA2.1-mini", (
        Figures(LLADA21_SOURCE, "63.42 48.36 48.36 78.42 36.67 81.33 28.85", _LLADA21_LAYOUT, _ONE_PASS),)),),
    "dream-coder": (FamilyRow("Dream-Coder-7B-Instruct", "dream", "Dream-org/Dream-Coder-v0-Instruct-7B", (
        Figures(DREAM_CODER_SOURCE, "82.9 79.6 21.4", (
            ("HumanEval", None), ("MBPP", "evalplus's MBPP (base tests), not the 500-problem test"),
            ("livecodebench_v6", "LiveCodeBench window 2024-10 to 2025-05, not 2025-02 to 2025-05"))),)),),
    "diffusiongemma": (FamilyRow("DiffusionGemma 26B-A4B-it", "diffusiongemma", "google/diffusiongemma-26B-A4B-it", (
        Figures(DIFFUSIONGEMMA_SOURCE, "77.6 73.2 73.2",
                (("MMLU-Pro", None), ("GPQA", _GPQA_DIAMOND), ("gpqa_diamond", None))),)),),
}

# Figures beyond the ReFusion table for its rows, from the model's own report.
PAPER_ROW_FIGURES: dict[str, tuple[Figures, ...]] = {
    "Qwen3-8B": (Figures(QWEN3_SOURCE, "39.3 83.0 29.1 20.9 22.8", (
        ("gpqa_diamond", None), ("ifeval", None), ("aime24", None), ("aime25", None),
        ("livecodebench_v5", "LiveCodeBench v5 window 2024-10 to 2025-02, not 2024-08 to 2025-02")), _ONE_PASS,
        _QWEN3_SAMPLES),),
}


def _recorded(manifest: dict[str, Any]) -> tuple[str | None, str | None, dict[str, Any]]:
    """The decoder kind, checkpoint and decoding options a result's manifest records."""
    return (manifest.get("model") or {}).get("kind"), manifest.get("model_ref"), manifest.get("decoding") or {}


def family_row(manifest: dict[str, Any]) -> FamilyRow | None:
    """The family row of a result's registry name, when its kind, checkpoint and decoding are the row's."""
    kind, ref, decoding = _recorded(manifest)
    for row in FAMILY_ROWS.get((manifest.get("model") or {}).get("name"), ()):
        if (row.kind, row.ref) == (kind, ref) and all(decoding.get(k) == v for k, v in row.decoding):
            return row
    return None


def published_row(manifest: dict[str, Any]) -> PublishedRow | None:
    """The published row shown beside a result: the ReFusion paper's (by kind and checkpoint) or its family's."""
    kind, ref, _ = _recorded(manifest)
    paper = PAPER_ROWS.get((kind, ref))
    if paper is not None:
        more = PAPER_ROW_FIGURES.get(paper, ())
        return PublishedRow(paper, sources_text(SOURCE, more), {**published_table()[paper], **merged_cells(more)})
    family = family_row(manifest)
    return None if family is None else PublishedRow(family.label, family.source, family.cells())


def paper_row(manifest: dict[str, Any]) -> str | None:
    """The label of the published row for a result, from what its manifest records; None otherwise."""
    row = published_row(manifest)
    return None if row is None else row.label


def paper_column(manifest: dict[str, Any]) -> str | None:
    """The published column for a result: the task's own ``paper_column`` (the ReFusion table's), as its manifest
    records it, or for a 2026 benchmark the task's name."""
    task = manifest.get("task") or {}
    if task.get("paper_column") in COLUMNS:
        return task["paper_column"]
    return task.get("name") if task.get("name") in TASK_COLUMNS else None
