"""From scored sample records to the per-(model, task) figures of docs/measurement.md."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any, Sequence

import numpy as np

from harness.stats.estimates import MetricSummary, summarize
from harness.stats.order import median_split, order_summary
from harness.stats.repeated import by_item, repeated_figures
from harness.stats.significance import unpaired_test

TOKEN_DEFINITION = "generated_until_eos"
MIN_TIMED_SAMPLES = 5  # a speed figure resting on fewer timed samples is marked ``low_sample``
# A sample's diagnostics may carry ``weights`` {metric: weight}: the task's declaration that the metric is a ratio
# pooled over units inside the samples, each sample's score the share of its own ``weight`` units.
WEIGHTS = "weights"
SERVED_SPREADS = ("request_tokens_per_second", "first_chunk_s", "chunks", "tokens_per_chunk")
PEAK_MEMORY_SCOPES = {
    "cuda": "this job only: CUDA max allocated, reset at the job's start, one model resident",
    "cpu": "process peak RSS since start: not resettable on CPU, so it includes earlier jobs of the run",
}


def metric_table(samples: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    names = sorted({name for s in samples for name in s["scores"]})
    return {name: metric_summary(samples, name).as_dict() for name in names}


def sample_weight(sample: dict[str, Any], metric: str) -> float | None:
    """The weight a task gave this sample's score for ``metric`` (its diagnostics' ``weights``), or None."""
    return ((sample.get("diagnostics") or {}).get(WEIGHTS) or {}).get(metric)


def metric_summary(samples: Sequence[dict[str, Any]], metric: str) -> MetricSummary:
    """The mean over items, each item's samples one cluster (its mean; with one sample per item, the mean over
    samples); where the task weights the metric (a figure pooled over units inside a sample, such as IFEval's
    instructions), the pooled ratio sum(weight * score) / sum(weight) instead. ``n`` counts items."""
    items = by_item([s for s in samples if metric in s["scores"]])
    weights = [[sample_weight(s, metric) for s in item] for item in items]
    if all(w is None for item in weights for w in item):
        return summarize([sum(s["scores"][metric] for s in item) / len(item) for item in items])
    return pooled_ratio([[(float(s["scores"][metric]), 1.0 if w is None else float(w)) for s, w in zip(item, ws)]
                         for item, ws in zip(items, weights)])


def pooled_ratio(items: Sequence[Sequence[tuple[float, float]]]) -> MetricSummary:
    """sum(w*x) / sum(w) over every (score x, weight w) of every item, with the ratio estimator's standard error,
    whose units are the items (the units pooled inside one sample, and an item's repeated samples, are not
    independent) and a normal 95% interval."""
    n, total = len(items), float(sum(w for item in items for _, w in item))
    if n == 0 or total <= 0:
        nan = float("nan")
        return MetricSummary(nan, nan, (nan, nan), n)
    ratio = sum(w * x for item in items for x, w in item) / total
    if n < 2:
        return MetricSummary(ratio, float("nan"), (float("nan"), float("nan")), n)
    residuals = sum(sum(w * (x - ratio) for x, w in item) ** 2 for item in items)
    stderr = math.sqrt(n / (n - 1) * residuals) / total
    return MetricSummary(ratio, stderr, (ratio - 1.96 * stderr, ratio + 1.96 * stderr), n)


def group_tables(samples: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-subject metrics; the overall mean over all samples is the size-weighted mean of these."""
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        if s.get("group") is not None:
            by_group[s["group"]].append(s)
    return {group: metric_table(items) for group, items in sorted(by_group.items())}


def recorded_batch_size(samples: Sequence[dict[str, Any]], fallback: int) -> int:
    """The batch size the samples were decoded at (their own records; the largest, since a last batch is short)."""
    return max((int(s["batch_size"]) for s in samples if not s.get("warmup") and "batch_size" in s),
               default=fallback)


def row_forwards(sample: dict[str, Any]) -> float | None:
    """The forwards a sample's own row took part in: its record's ``forwards``; for a record stored before that
    field, its ``nfe`` when it was decoded alone (a batch of one, where the two agree), else None (unknown, never
    the batch's share passed off as the row's)."""
    if sample.get("forwards") is not None:
        return float(sample["forwards"])
    if int(sample.get("batch_size", 1)) == 1 and sample.get("nfe"):
        return float(sample["nfe"])
    return None


def tokens_per_forward(samples: Sequence[dict[str, Any]]) -> float | None:
    """Σ gen_tokens / Σ the forwards each row took part in (the field's per-sequence TPF: 1.00 for an
    autoregressive decoder at any batch size); None when a sample's forwards are unknown or none were counted."""
    forwards = [row_forwards(s) for s in samples]
    if not samples or any(f is None for f in forwards) or not sum(forwards):
        return None
    return sum(s["gen_tokens"] for s in samples) / sum(forwards)


def speed_figures(samples: Sequence[dict[str, Any]], batch_size: int, peak_memory: int | None,
                  peak_memory_device: str | None = None) -> dict[str, Any]:
    """Speed figures of docs/measurement.md; ``batch_size`` is only the fallback for records that carry none."""
    timed = [s for s in samples if not s.get("warmup")]
    tpf = tokens_per_forward(samples)
    calls = sum(s["nfe"] for s in samples)
    tokens = sum(s["gen_tokens"] for s in samples)
    figures = {
        "token_definition": TOKEN_DEFINITION,
        "tokens_per_second": _tps(timed),
        "tokens_per_forward": tpf,
        "forwards_per_sample": (sum(row_forwards(s) for s in samples) / len(samples)) if tpf else None,
        # what a token cost in batched network calls (each call split across its rows): falls with the batch size
        "network_calls_per_token": calls / tokens if calls and tokens else None,
        "latency_s": spread([s["latency_s"] for s in timed]),
        "gen_tokens_mean": float(np.mean([s["gen_tokens"] for s in samples])) if samples else None,
        "gen_tokens_after_stop_mean": (float(np.mean([s["gen_tokens_after_stop"] for s in samples]))
                                       if samples else None),
        "canvas_tokens": max((s["canvas_tokens"] for s in samples), default=None),
        "warmup_samples": len(samples) - len(timed),
        "timed_samples": len(timed),
        "min_timed_samples": MIN_TIMED_SAMPLES,
        "low_sample": len(timed) < MIN_TIMED_SAMPLES,
        "batch_size": recorded_batch_size(samples, batch_size),
        "schedule": sorted({s.get("schedule", "static") for s in timed}),
        "peak_memory_bytes": peak_memory,
        "per_token": per_token(timed),
    }
    # rows in flight: how long requests waited for a row; engine-served models: each request's own client-side
    # wall time (the batch's requests in flight together); models served over HTTP (openai:) also their tokens/s,
    # and, streamed, the time to the first chunk of text and the chunks the text came in
    for name in ("queue_s", "request_latency_s", *SERVED_SPREADS):
        values = [s[name] for s in timed if s.get(name) is not None]
        if values:
            figures[name] = spread(values)
    if any("retries" in s for s in samples):
        figures["retries"] = sum(int(s.get("retries") or 0) for s in samples)
    if peak_memory_device in PEAK_MEMORY_SCOPES:
        figures["peak_memory_scope"] = PEAK_MEMORY_SCOPES[peak_memory_device]
    ranks = sorted({s.get("rank", 0) for s in timed})
    if len(ranks) > 1:  # data-parallel: each rank's throughput, and their sum as the run's
        per_rank = {str(r): _tps([s for s in timed if s.get("rank", 0) == r]) for r in ranks}
        figures["per_rank_tokens_per_second"] = per_rank
        figures["combined_tokens_per_second"] = sum(v for v in per_rank.values() if v is not None)
    return figures


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and the 50th, 90th and 99th percentiles (None without values)."""
    if not len(values):
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    return {"mean": float(np.mean(values)), **{f"p{q}": float(np.percentile(values, q)) for q in (50, 90, 99)}}


def per_token(timed: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """What one generated token costs over the timed samples: seconds, network forwards and seconds inside them
    (None where not counted or not measured): the inputs of the speedup attribution."""
    tokens = sum(s["gen_tokens"] for s in timed)
    forwards = sum(s["nfe"] for s in timed)
    inside = [s.get("forward_s") for s in timed]
    measured = bool(timed) and all(v is not None for v in inside)
    seconds = busy_seconds(timed)
    return {
        "seconds": seconds / tokens if tokens else None,
        "forwards": forwards / tokens if tokens and forwards else None,
        "forward_seconds": sum(inside) / tokens if tokens and measured and forwards else None,
    }


def busy_seconds(samples: Sequence[dict[str, Any]]) -> float:
    """The wall time the samples' decoding took: a static batch's share (``latency_s``, its time split across its
    rows) per static sample, plus each continuous phase's wall time once (its requests overlap, so their latencies
    do not add up; a phase's time is its last finish, ``phase_elapsed_s``)."""
    static = sum(s["latency_s"] for s in samples if s.get("schedule", "static") == "static")
    phases: dict[str, float] = {}
    for s in samples:
        if s.get("schedule", "static") != "static":
            phases[s["phase"]] = max(phases.get(s["phase"], 0.0), s["phase_elapsed_s"])
    return static + sum(phases.values())


def _tps(samples: Sequence[dict[str, Any]]) -> float | None:
    seconds = busy_seconds(samples)
    return sum(s["gen_tokens"] for s in samples) / seconds if seconds > 0 else None


def diagnostic_rates(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Boolean flags become rates (empty, invalid, truncated); ``*_status`` flags (code execution) become counts.
    Other per-sample diagnostics (output tails) stay in the sample records."""
    n = len(samples)
    out: dict[str, Any] = {"truncated_rate": sum(bool(s["hit_max_tokens"]) for s in samples) / n if n else None}
    keys = sorted({k for s in samples for k in s.get("diagnostics", {})})
    for key in keys:
        values = [s["diagnostics"][key] for s in samples if key in s.get("diagnostics", {})]
        if all(isinstance(v, bool) for v in values):
            out[f"{key}_rate"] = sum(values) / len(values)
        elif key.endswith("_status"):
            out[f"{key}_counts"] = dict(Counter(str(v) for v in values))
    return out


def decode_order(samples: Sequence[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The order statistics of docs/measurement.md over the samples whose order can be measured (the
    ``decode_order`` figures scoring gave each record, ``harness.stats.order.order_record``, with a defined tau; the
    rest are counted as skipped); None where no sample recorded its commit steps (an engine-served model,
    DiffusionGemma)."""
    if not any("decode_order" in s for s in samples):
        return None
    measured = [s for s in samples if s.get("decode_order") and s["decode_order"]["order_tau"] is not None]
    orders = [s["decode_order"] for s in measured]
    return {
        "samples": len(measured),
        "skipped": len(samples) - len(measured),
        **order_summary(orders),
        "by_order": order_split(measured, [o["order_tau"] for o in orders], metric),
    }


def order_split(samples: Sequence[dict[str, Any]], taus: Sequence[float], metric: str) -> dict[str, Any] | None:
    """``metric`` over the samples decoded more out of order (tau below the median) and more in order (above it),
    with the unpaired test the gate uses (Fisher's exact on 0/1 scores): do out-of-order decodes fail more? None
    where a half is empty (all taus equal, as AR's)."""
    below, above = median_split(taus)
    if not below or not above:
        return None
    out_of_order = metric_summary([samples[i] for i in below], metric).as_dict()
    in_order = metric_summary([samples[i] for i in above], metric).as_dict()
    test = unpaired_test(in_order, out_of_order)
    return {"below_median": out_of_order, "above_median": in_order, "test": test.test, "p_value": test.p_value}


def aggregate(samples: Sequence[dict[str, Any]], primary_metric: str, batch_size: int,
              peak_memory: int | None, peak_memory_device: str | None = None,
              answer_key: str | None = None) -> dict[str, Any]:
    """A result's figures; where items have several samples, ``repeated`` (harness.stats.repeated) and every
    metric's interval over items. ``answer_key``: the task's (``Task.answer_key``), for maj@K."""
    repeated = repeated_figures(samples, primary_metric, answer_key)
    return {
        "n_samples": len(samples),
        "primary_metric": primary_metric,
        **({"repeated": repeated} if repeated is not None else {}),
        "metrics": metric_table(samples),
        "groups": group_tables(samples),
        "speed": speed_figures(samples, batch_size, peak_memory, peak_memory_device),
        "diagnostics": diagnostic_rates(samples),
        "decode_order": decode_order(samples, primary_metric),
    }
