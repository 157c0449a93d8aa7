"""The ReFusion paper's published Table 1 (arXiv 2512.13586), and which results map onto its rows and columns.

These are the authors' figures on their hardware; the report shows them beside measured numbers, labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCE = "ReFusion paper (arXiv 2512.13586), Table 1: zero-shot, chat template, batch 1, authors' GPU"
COLUMNS = ("MMLU-Pro", "ARC-C", "GSM8K", "MATH", "GPQA", "HumanEval", "MBPP")

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
    tokens_per_second: float


def published_table() -> dict[str, dict[str, PublishedCell]]:
    """Row name -> column name -> published cell."""
    table = {}
    for row, text in _TABLE.items():
        cells = [PublishedCell(*map(float, pair.split("/"))) for pair in text.split()]
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


def paper_row(manifest: dict[str, Any]) -> str | None:
    """The paper's row for a result, from the decoder kind and checkpoint its manifest records; None otherwise."""
    kind = (manifest.get("model") or {}).get("kind")
    return PAPER_ROWS.get((kind, manifest.get("model_ref")))


def paper_column(manifest: dict[str, Any]) -> str | None:
    """The paper's column for a result: the task's own ``paper_column``, as its manifest records it."""
    column = (manifest.get("task") or {}).get("paper_column")
    return column if column in COLUMNS else None
