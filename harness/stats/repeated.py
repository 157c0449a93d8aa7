"""Figures over repeated samples per item (``--samples K``, docs/measurement.md): avg@K, pass@k, maj@K and how
often an item's samples agree.

An item's K samples are one cluster, not K independent draws: every interval here is over the items' own figures
(a sample mean over items, its standard error from their spread), so K samples of 30 AIME items give 30 units, not
30K. With K = 1 each item is its own cluster and the figures are the one-sample ones. Records are read as stored
(``to_json``): ``doc_id`` names the item, ``sample`` (absent: 0) the sample.
"""

from __future__ import annotations

import json
from math import comb
from typing import Any, Sequence

from harness.stats.estimates import summarize


def by_item(samples: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records grouped by item (``doc_id``), items in order of first appearance, each item's samples by
    index; a record without an item is its own."""
    items: dict[Any, list[dict[str, Any]]] = {}
    for position, record in enumerate(samples):
        item = record.get("doc_id")
        items.setdefault(("record", position) if item is None else ("item", item), []).append(record)
    return [sorted(item, key=lambda r: r.get("sample", 0)) for item in items.values()]


def pass_at_k(n: int, correct: int, k: int) -> float:
    """The unbiased estimator of the chance that at least one of k samples, drawn without replacement from n of
    which ``correct`` are right, is right: 1 - C(n - c, k) / C(n, k) (Chen et al. 2021)."""
    if not 0 < k <= n or not 0 <= correct <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= correct <= n, got k={k}, n={n}, correct={correct}")
    return 1.0 - comb(n - correct, k) / comb(n, k)


def vote(item: Sequence[dict[str, Any]], metric: str, answer_key: str, invalid: str = "[invalid]") -> float:
    """maj@K of one item: the primary score of the answer most of its samples extracted (ties go to the answer seen
    first; samples with no answer do not vote); the first sample's score when none extracted one."""
    scored = [r for r in item if metric in (r.get("scores") or {})]
    counts: dict[str, int] = {}
    first: dict[str, dict[str, Any]] = {}
    for record in scored:
        answer = (record.get("extracted") or {}).get(answer_key)
        if answer in (None, "", invalid):
            continue
        key = json.dumps(answer, sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, record)
    if not counts:
        return float(scored[0]["scores"][metric])
    winner = max(counts, key=counts.__getitem__)  # max keeps the first of equal counts: dicts keep insertion order
    return float(first[winner]["scores"][metric])


def repeated_figures(samples: Sequence[dict[str, Any]], metric: str,
                     answer_key: str | None = None) -> dict[str, Any] | None:
    """results.json's ``repeated``: avg@K, pass@k for k = 1..K (0/1 metrics), maj@K (tasks with an extracted
    answer) and the agreement shares, each over the items; None when no item has more than one sample."""
    scored_items = []
    for item in by_item(samples):
        values = [float(r["scores"][metric]) for r in item if metric in (r.get("scores") or {})]
        if values:
            scored_items.append((item, values))
    k_max = max((len(values) for _, values in scored_items), default=0)
    if k_max < 2:
        return None
    binary = all(v in (0.0, 1.0) for _, values in scored_items for v in values)
    out: dict[str, Any] = {
        "samples_per_item": k_max,
        "items": len(scored_items),
        "complete_items": sum(len(values) == k_max for _, values in scored_items),
        "metric": metric,
        "avg": summarize([sum(values) / len(values) for _, values in scored_items]).as_dict(),
        "pass_at": None,
        "maj": None,
        "agreement": None,
    }
    if binary:
        out["pass_at"] = {str(k): summarize([pass_at_k(len(values), int(sum(values)), k)
                                             for _, values in scored_items if len(values) >= k]).as_dict()
                          for k in range(1, k_max + 1)}
        shares = [sum(values) / len(values) for _, values in scored_items]
        out["agreement"] = {"all_correct": sum(s == 1.0 for s in shares) / len(shares),
                            "all_wrong": sum(s == 0.0 for s in shares) / len(shares),
                            "mixed": sum(0.0 < s < 1.0 for s in shares) / len(shares)}
    if answer_key is not None:
        out["maj"] = summarize([vote(item, metric, answer_key) for item, _ in scored_items]).as_dict()
    return out
