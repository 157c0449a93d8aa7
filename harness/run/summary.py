"""The table printed at the end of a run; ``timed`` marks speed figures resting on too few timed samples, a
``batch`` column appears when a decode ran out of memory and the rows settled below the batch size asked, and
``pass@K`` and ``maj@K`` columns when a result has repeated samples (its metric then reads ``avg@K``, its ``n``
items x K)."""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from harness.run.records import ResultEntry


def timed_label(speed: dict[str, Any]) -> str:
    """The number of timed samples behind the speed figures, marked when below the stated minimum."""
    n = speed.get("timed_samples")
    if speed.get("low_sample"):
        return f"{n} (low, <{speed.get('min_timed_samples')})"
    return "-" if n is None else str(n)


def summary_frame(results: Sequence[ResultEntry]) -> pd.DataFrame:
    rows = []
    for r in results:
        lo, hi = r.primary.get("ci95", [float("nan"), float("nan")])
        speed = r.speed
        repeated = r.extra.get("repeated") or {}
        k = repeated.get("samples_per_item", 1)
        rows.append({
            "model": r.model,
            "task": r.task,
            "metric": r.primary_metric if k == 1 else f"avg@{k} {r.primary_metric}",
            "score": r.primary.get("value"),
            "95% CI": f"[{lo:.3f}, {hi:.3f}]",
            "n": r.n_samples if k == 1 else f"{repeated['items']}x{k}",
            "tokens/s": speed["tokens_per_second"],
            "timed": timed_label(speed),
            "tokens/fwd": speed["tokens_per_forward"],
            "p50 s": speed["latency_s"]["p50"],
            "truncated": r.diagnostics.get("truncated_rate"),
            "data": r.manifest["data_source"],
        })
    frame = pd.DataFrame(rows)
    if any(r.extra.get("repeated") for r in results):
        frame["pass@K"] = [repeated_value(r, "pass_at") for r in results]
        frame["maj@K"] = [repeated_value(r, "maj") for r in results]
    if any(r.manifest.get("batch_size_settled") is not None for r in results):
        frame["batch"] = [batch_label(r.manifest) for r in results]
    return frame


def repeated_value(result: ResultEntry, figure: str) -> float | None:
    """A result's pass@K (``pass_at`` at its K) or maj@K; None where it has no such figure."""
    repeated = result.extra.get("repeated") or {}
    value = repeated.get(figure)
    if figure == "pass_at" and value:
        value = value.get(str(repeated["samples_per_item"]))
    return None if not value else value.get("value")


def batch_label(manifest: dict[str, Any]) -> str:
    """The batch size asked, and where it settled after running out of memory: ``8→2 (out of memory)``."""
    asked, settled = manifest.get("batch_size"), manifest.get("batch_size_settled")
    return f"{asked}" if settled is None else f"{asked}→{settled} (out of memory)"


def summary_table(results: Sequence[ResultEntry]) -> str:
    frame = summary_frame(results)
    return frame.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-")
