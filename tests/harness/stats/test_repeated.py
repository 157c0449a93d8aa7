"""avg@K, pass@k, maj@K and the clustered intervals, against independent computations: pass@k by enumerating every
k-subset of an item's samples, intervals from the items' own means, votes counted by hand."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from harness.stats.aggregate import metric_summary
from harness.stats.estimates import summarize
from harness.stats.repeated import pass_at_k, repeated_figures, vote

METRIC = "acc,none"


def records(scores: dict[str, list[float]], answers: dict[str, list[str | None]] | None = None) -> list[dict]:
    out = []
    for doc, values in scores.items():
        for k, value in enumerate(values):
            record = {"doc_id": doc, "sample": k, "scores": {METRIC: value}}
            if answers is not None:
                record["extracted"] = {"flex": answers[doc][k]}
            out.append(record)
    random.Random(0).shuffle(out)  # the figures do not depend on record order
    return out


@pytest.mark.parametrize("n, correct", [(5, 0), (5, 2), (6, 6), (8, 3), (4, 1)])
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_sample(n, correct):
    outcomes = [1] * correct + [0] * (n - correct)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, correct, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_refuses_k_beyond_n():
    with pytest.raises(ValueError, match="0 < k <= n"):
        pass_at_k(3, 1, 4)


def test_the_figures_are_over_items_with_their_samples_one_cluster():
    scores = {"a": [1, 1, 1, 1], "b": [0, 0, 0, 0], "c": [1, 0, 0, 1], "d": [0, 0, 1, 0], "e": [1, 1, 0, 1]}
    figures = repeated_figures(records(scores), METRIC)
    means = [sum(v) / 4 for v in scores.values()]
    assert figures["samples_per_item"] == 4 and figures["items"] == 5
    assert figures["avg"]["value"] == pytest.approx(sum(means) / 5)
    stderr = math.sqrt(sum((m - sum(means) / 5) ** 2 for m in means) / 4) / math.sqrt(5)
    assert figures["avg"]["stderr"] == pytest.approx(stderr) and figures["avg"]["n"] == 5
    # K = 4 samples of 5 items treated as 20 independent draws would claim a much narrower interval
    naive = summarize([float(v) for vs in scores.values() for v in vs])
    assert naive.stderr < figures["avg"]["stderr"]
    assert figures["pass_at"]["1"]["value"] == pytest.approx(figures["avg"]["value"])
    assert figures["pass_at"]["4"]["value"] == pytest.approx(4 / 5)  # every item but b has a correct sample
    assert figures["pass_at"]["2"]["value"] == pytest.approx(
        sum(pass_at_k(4, int(sum(v)), 2) for v in scores.values()) / 5)
    assert figures["agreement"] == {"all_correct": 0.2, "all_wrong": 0.2, "mixed": 0.6}
    assert figures["maj"] is None  # no answer key given


def test_one_sample_per_item_keeps_the_one_sample_figures():
    flat = records({str(i): [float(i % 3 == 0)] for i in range(12)})
    assert repeated_figures(flat, METRIC) is None
    assert metric_summary(flat, METRIC) == summarize([r["scores"][METRIC] for r in flat])


def test_the_majority_answer_scores_the_item_and_a_tie_goes_to_the_first_seen():
    scores = {"a": [0, 1, 1, 0, 0], "b": [1, 0, 0, 1], "c": [0, 0, 0]}
    answers = {"a": ["7", "4", "4", "[invalid]", None], "b": ["2", "3", "3", "2"], "c": [None, "", "[invalid]"]}
    items = {doc: [r for r in records(scores, answers) if r["doc_id"] == doc] for doc in scores}
    ordered = {doc: sorted(item, key=lambda r: r["sample"]) for doc, item in items.items()}
    assert vote(ordered["a"], METRIC, "flex") == 1.0  # "4" twice beats "7" once; no answer does not vote
    assert vote(ordered["b"], METRIC, "flex") == 1.0  # "2" and "3" twice each: "2" came first
    assert vote(ordered["c"], METRIC, "flex") == 0.0  # nothing extracted: the first sample's score
    figures = repeated_figures(records(scores, answers), METRIC, "flex")
    assert figures["maj"]["value"] == pytest.approx(2 / 3) and figures["maj"]["n"] == 3
    assert figures["samples_per_item"] == 5 and figures["complete_items"] == 1
    # an item with fewer samples than k takes no part in pass@k
    assert figures["pass_at"]["5"]["n"] == 1 and figures["pass_at"]["3"]["n"] == 3


def test_a_weighted_metric_pools_within_items_and_its_error_counts_items():
    rows = []
    for doc, values in {"a": [(1.0, 2), (0.5, 2)], "b": [(0.0, 1), (0.0, 3)], "c": [(1.0, 4), (1.0, 4)]}.items():
        rows += [{"doc_id": doc, "sample": k, "scores": {METRIC: x}, "diagnostics": {"weights": {METRIC: w}}}
                 for k, (x, w) in enumerate(values)]
    summary = metric_summary(rows, METRIC)
    total = 2 + 2 + 1 + 3 + 4 + 4
    ratio = (2 * 1.0 + 2 * 0.5 + 0 + 0 + 4 + 4) / total
    residuals = [2 * (1 - ratio) + 2 * (0.5 - ratio), -4 * ratio, 8 * (1 - ratio)]
    assert summary.value == pytest.approx(ratio) and summary.n == 3
    assert summary.stderr == pytest.approx(math.sqrt(3 / 2 * sum(r * r for r in residuals)) / total)
