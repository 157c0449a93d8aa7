"""The harness's own preset, beside the models' (models.registry): ``smoke``, a first run that finishes quickly.

A default canvas of 512 tokens makes a first run of several tiny models take minutes per sample on a small CPU; a
32-token canvas checks that every model, task and report runs, and says so in the output: its scores and speeds are
not the tasks'.
"""

from __future__ import annotations

SMOKE_PRESET = "smoke"
SMOKE_CANVAS = 32


def smoke_canvas(preset: str | None) -> int | None:
    """The canvas the smoke preset sets for every model and task (None for any other preset)."""
    return SMOKE_CANVAS if preset == SMOKE_PRESET else None
