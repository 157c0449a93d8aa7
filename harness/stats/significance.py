"""Accuracy tests between two sets of results of one task, shared by the regression gate and the sweep frontier.

Paired (items matched by ``doc_id``): exact McNemar on the discordant pairs for 0/1 scores, a paired t-test for
graded ones. Unpaired (summaries only): Fisher's exact test for 0/1 metrics, a Welch z-test on mean ± stderr
otherwise. No run loop here, so the report side may use it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy import stats as scipy_stats

from harness.errors import UserError
from harness.stats.estimates import mcnemar_exact


class PairingError(UserError, ValueError):
    """Two sets of sample records that cannot be paired; the message is one line for the user."""


@dataclass(frozen=True)
class AccuracyTest:
    """One accuracy comparison before multiple-testing correction."""

    n_baseline: int
    n_candidate: int
    baseline: float  # mean of the primary metric, 0..1 (over the paired items when paired)
    candidate: float
    test: str
    p_value: float
    right_to_wrong: int | None = None
    wrong_to_right: int | None = None
    # over repeated samples (items' means): the spread of an item's figure on either side, sqrt(var_b + var_c) of
    # the item means, which bounds what the test can detect (harness.gate.power.clustered_power)
    item_sd: float | None = None

    @property
    def delta_points(self) -> float:
        return 100.0 * (self.candidate - self.baseline)


def _is_binary(values: Sequence[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def paired_test(pairs: Sequence[tuple[float, float]]) -> AccuracyTest:
    """Exact McNemar on the discordant pairs for 0/1 scores; a paired t-test for graded scores."""
    n = len(pairs)
    base = [b for b, _ in pairs]
    cand = [c for _, c in pairs]
    mean_b, mean_c = sum(base) / n, sum(cand) / n
    if _is_binary(base) and _is_binary(cand):
        r2w = sum(1 for b, c in pairs if b == 1.0 and c == 0.0)
        w2r = sum(1 for b, c in pairs if b == 0.0 and c == 1.0)
        return AccuracyTest(n, n, mean_b, mean_c, "McNemar exact (paired)", mcnemar_exact(r2w, w2r), r2w, w2r)
    diffs = [c - b for b, c in pairs]
    if n < 2 or all(d == diffs[0] for d in diffs):
        p = 1.0 if all(d == 0 for d in diffs) or n < 2 else 0.0
    else:
        p = float(scipy_stats.ttest_rel(cand, base).pvalue)
    return AccuracyTest(n, n, mean_b, mean_c, "paired t (graded scores)", p)


def clustered_test(pairs: Sequence[tuple[float, float]]) -> AccuracyTest:
    """The paired t-test over items' mean scores of repeated samples (each item one cluster), with the items'
    spread for the power bound."""
    test = paired_test(pairs)
    n = len(pairs)
    spread = (float(np.var([b for b, _ in pairs], ddof=1) + np.var([c for _, c in pairs], ddof=1)) ** 0.5
              if n > 1 else float("nan"))
    return dataclasses.replace(test, test="paired t over items (repeated samples)", item_sd=spread)


def looks_binary(summary: dict[str, Any]) -> bool:
    """Whether a metric summary came from 0/1 scores: then its stderr is exactly sqrt(p(1-p)/(n-1))."""
    p, n, stderr = summary.get("value"), summary.get("n"), summary.get("stderr")
    if p is None or not n:
        return False
    if n == 1 or stderr is None or (isinstance(stderr, float) and math.isnan(stderr)):
        return p in (0.0, 1.0)
    expected = math.sqrt(p * (1 - p) / (n - 1))
    return abs(stderr - expected) <= 1e-6 * max(1.0, expected) and abs(p * n - round(p * n)) < 1e-6


def unpaired_test(base: dict[str, Any], cand: dict[str, Any]) -> AccuracyTest:
    """Fisher's exact test on right/wrong counts for 0/1 metrics; a Welch z-test on mean ± stderr otherwise."""
    nb, nc = int(base["n"]), int(cand["n"])
    pb, pc = float(base["value"]), float(cand["value"])
    if looks_binary(base) and looks_binary(cand):
        kb, kc = round(pb * nb), round(pc * nc)
        p = float(scipy_stats.fisher_exact([[kb, nb - kb], [kc, nc - kc]]).pvalue)
        return AccuracyTest(nb, nc, pb, pc, "Fisher exact (unpaired)", p)
    se = math.sqrt(float(base.get("stderr") or 0.0) ** 2 + float(cand.get("stderr") or 0.0) ** 2)
    if se == 0 or math.isnan(se):
        p = 1.0 if pc == pb else 0.0
    else:
        p = float(2 * scipy_stats.norm.sf(abs(pc - pb) / se))
    return AccuracyTest(nb, nc, pb, pc, "Welch z (unpaired)", p)


def pair_by_doc(base: Sequence[dict[str, Any]], cand: Sequence[dict[str, Any]], metric: str,
                where: str) -> list[tuple[float, float]]:
    """(baseline score, candidate score) for every item both runs scored, in baseline order; an item's score is
    the mean over its repeated samples (``sample``), one figure per item."""
    def by_doc(records: Sequence[dict[str, Any]], side: str) -> dict[str, float]:
        scores: dict[str, dict[int, float]] = {}
        for r in records:
            doc, sample = str(r["doc_id"]), int(r.get("sample", 0))
            if sample in scores.get(doc, {}):
                raise PairingError(f"{where}: {side} has doc_id {doc}" + (f" sample {sample}" if sample else "")
                                   + " twice")
            if metric not in r["scores"]:
                raise PairingError(f"{where}: a {side} sample of doc_id {doc} has no score {metric}")
            scores.setdefault(doc, {})[sample] = float(r["scores"][metric])
        return {doc: sum(item.values()) / len(item) for doc, item in scores.items()}

    b, c = by_doc(base, "baseline"), by_doc(cand, "candidate")
    pairs = [(b[d], c[d]) for d in b if d in c]
    if not pairs:
        raise PairingError(f"{where}: baseline and candidate share no items (doc_id), nothing to pair")
    return pairs
