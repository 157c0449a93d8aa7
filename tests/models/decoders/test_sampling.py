"""The shared sampling pieces against hand computations."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chisquare

from models.decoders.contract import DecodeResult, output_from_tokens
from models.decoders.sampling import (
    add_gumbel_noise,
    as_logits,
    check_inputs,
    dream_timesteps,
    dream_transfer_count,
    llada_step_counts,
    llada_transfer_counts,
    make_generator,
    margin_confidence,
    max_prob_confidence,
    neg_entropy_confidence,
    passes_simplex_check,
    sample_categorical,
    top_counts,
    top_k_filter,
    top_p_filter,
    topk_ignores_padding,
)


def test_gumbel_at_zero_temperature_is_the_logits_tensor_itself():
    logits = torch.randn(2, 3, 5)
    assert add_gumbel_noise(logits, 0.0, make_generator(0, "cpu")) is logits


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_gumbel_argmax_samples_softmax_over_temperature(temperature):
    logits = torch.tensor([1.0, 0.2, -0.5, 2.0, 0.0])
    n = 20000
    noised = add_gumbel_noise(logits.expand(n, -1), temperature, make_generator(123, "cpu"))
    assert noised.dtype == torch.float64
    counts = torch.bincount(noised.argmax(-1), minlength=5).double()
    expected = torch.softmax(logits.double() / temperature, -1) * n
    assert chisquare(counts.numpy(), expected.numpy()).pvalue > 1e-3


def test_gumbel_seeded_is_reproducible_and_seeds_differ():
    logits = torch.zeros(50, 7)
    a = add_gumbel_noise(logits, 1.0, make_generator(5, "cpu")).argmax(-1)
    b = add_gumbel_noise(logits, 1.0, make_generator(5, "cpu")).argmax(-1)
    c = add_gumbel_noise(logits, 1.0, make_generator(6, "cpu")).argmax(-1)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_sample_categorical_matches_probabilities():
    probs = torch.tensor([0.1, 0.6, 0.3, 0.0], dtype=torch.float64)
    n = 20000
    draws = sample_categorical(probs.expand(n, -1), make_generator(3, "cpu"))
    counts = torch.bincount(draws, minlength=4).double()
    assert counts[3] == 0
    assert chisquare(counts[:3].numpy(), (probs[:3] / probs.sum() * n).numpy()).pvalue > 1e-3


def test_top_p_keeps_the_crossing_token_and_renormalises():
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])
    filtered = top_p_filter(torch.log(probs), 0.7)
    kept = torch.softmax(filtered, -1)
    # sorted: 0.5 (cum 0.5), 0.3 (cum 0.8 > 0.7, kept as the crossing token), then dropped
    assert torch.allclose(kept, torch.tensor([0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8]), atol=1e-6)
    assert filtered[0] == torch.finfo(torch.float32).min


def test_top_p_always_keeps_the_top_token():
    filtered = top_p_filter(torch.log(torch.tensor([0.9, 0.1])), 0.05)
    assert torch.allclose(torch.softmax(filtered, -1), torch.tensor([1.0, 0.0]))


def test_top_k_keeps_ties_at_the_boundary():
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0]])
    kept = top_k_filter(logits, 2) > torch.finfo(torch.float32).min
    assert kept.tolist() == [[True, False, True, True, False]]
    assert (top_k_filter(logits, 99) == logits).all()


def test_confidence_functions_on_hand_built_distributions():
    probs = torch.tensor([[0.2, 0.5, 0.3], [0.25, 0.25, 0.5]])
    conf, tokens = max_prob_confidence(probs)
    assert tokens.tolist() == [1, 2] and torch.allclose(conf, torch.tensor([0.5, 0.5]))
    assert torch.allclose(margin_confidence(probs), torch.tensor([0.2, 0.25]))
    expected = [sum(p * math.log(p + 1e-10) for p in row) for row in probs.tolist()]
    assert torch.allclose(neg_entropy_confidence(probs), torch.tensor(expected))
    # a one-hot row is the surest: neg-entropy 0
    assert neg_entropy_confidence(torch.tensor([0.0, 1.0, 0.0])).abs() < 1e-6


def test_passes_simplex_check():
    assert passes_simplex_check(torch.tensor([[0.2, 0.8]]))
    assert not passes_simplex_check(torch.tensor([[0.2, float("nan")]]))


@pytest.mark.parametrize(
    "masks,steps,expected",
    [(10, 4, [3, 3, 2, 2]), (8, 8, [1] * 8), (3, 5, [1, 1, 1, 0, 0]), (0, 3, [0, 0, 0]), (7, 1, [7])],
)
def test_llada_transfer_counts(masks, steps, expected):
    counts = llada_transfer_counts(torch.tensor([masks]), steps)
    assert counts.tolist() == [expected]
    assert llada_step_counts(masks, steps) == expected  # the host's copy of the same split


def test_llada_transfer_counts_invariants_per_row():
    mask_counts = torch.tensor([0, 1, 5, 13, 32, 33])
    counts = llada_transfer_counts(mask_counts, 6)
    assert counts.sum(1).tolist() == mask_counts.tolist()
    assert ((counts.max(1).values - counts.min(1).values) <= 1).all()
    assert (counts[:, :-1] >= counts[:, 1:]).all()


def test_dream_timesteps_and_floor_count():
    t = dream_timesteps(4, 1e-3, "cpu")
    assert t.dtype == torch.float32 and t[0] == 1 and abs(t[-1].item() - 1e-3) < 1e-7
    assert torch.allclose(t[1:] - t[:-1], torch.full((4,), -(1 - 1e-3) / 4))
    mask_index = torch.zeros(2, 20, dtype=torch.bool)
    mask_index[:, 5:15] = True  # 10 masks per row
    for i in range(3):
        expected = math.floor(10 * (1 - t[i + 1].item() / t[i].item()))
        assert dream_transfer_count(mask_index, t[i], t[i + 1], last=False) == expected
    assert dream_transfer_count(mask_index, t[3], t[4], last=True) == 10
    # step 0 of a steps == masks schedule commits nothing: 10 * (1 - 0.9001) < 1
    t10 = dream_timesteps(10, 1e-3, "cpu")
    assert dream_transfer_count(mask_index, t10[0], t10[1], last=False) == 0


def test_as_logits_accepts_tensor_or_object():
    logits = torch.zeros(1, 2, 3)
    assert as_logits(logits) is logits
    assert as_logits(type("O", (), {"logits": logits})()) is logits
    with pytest.raises(TypeError, match="expected a logits Tensor"):
        as_logits((logits,))


def test_output_rows_cut_after_first_eos_and_split_nfe():
    tokens = torch.tensor([[5, 7, 2, 9, 2], [5, 6, 7, 8, 9], [3, 2, 9, 2, 2]])
    steps = torch.tensor([[3, 1, 2, 5, 4], [1, 2, 3, 4, 5], [2, 1, 1, 1, 1]])
    output = output_from_tokens(tokens, 12, eos_ids=[2, 3], steps=steps)
    assert output.nfe == 12 and output.tokens is tokens
    assert list(output.rows) == [
        DecodeResult([5, 7, 2], 4.0, False, forwards=12, commit_step=(3, 1, 2)),  # all 12 forwards each
        DecodeResult([5, 6, 7, 8, 9], 4.0, True, forwards=12, commit_step=(1, 2, 3, 4, 5)),
        DecodeResult([3], 4.0, False, forwards=12, commit_step=(2,)),
    ]


def test_check_inputs_one_line_errors():
    check_inputs(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3))  # fine
    with pytest.raises(ValueError, match=r"input_ids must be \[B, P\]"):
        check_inputs(torch.zeros(3, dtype=torch.long), None)
    with pytest.raises(ValueError, match="attention_mask must have the shape of input_ids"):
        check_inputs(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 4))


def tied_rows(generator: torch.Generator, rows: int, max_width: int) -> tuple[torch.Tensor, list[int], list[int]]:
    """Canvas-like rows of confidences: -inf outside one window of few distinct values (ties everywhere), each row its
    own width (-inf past it) and count, widths and counts on both sides of topk's partial-sort threshold."""
    scores = torch.full((rows, max_width), float("-inf"))
    counts, widths = [], []
    for row in range(rows):
        width = int(torch.randint(4, max_width + 1, (1,), generator=generator))
        lo = int(torch.randint(0, width, (1,), generator=generator))
        hi = min(width, lo + int(torch.randint(1, 40, (1,), generator=generator)))
        scores[row, lo:hi] = torch.randint(0, 3, (hi - lo,), generator=generator).float() / 4
        counts.append(int(torch.randint(0, min(hi - lo, 10) + 1, (1,), generator=generator)))
        widths.append(width)
    return scores, counts, widths


@pytest.mark.parametrize("max_width", [40, 700])
def test_top_counts_picks_what_topk_picks_on_each_row_alone_ties_included(max_width):
    """Rows of different widths and counts in one call against ``torch.topk`` on each row cut to its width: the same
    columns, although the values tie in almost every row (topk's pick among ties depends on the row's length)."""
    generator = torch.Generator().manual_seed(max_width)
    ties = 0
    for _ in range(40):
        scores, counts, widths = tied_rows(generator, 32, max_width)
        chosen = top_counts(scores, counts, widths)
        for row, (count, width) in enumerate(zip(counts, widths)):
            alone = torch.zeros(max_width, dtype=torch.bool)
            alone[torch.topk(scores[row:row + 1, :width], count).indices[0]] = True
            assert torch.equal(chosen[row], alone), (row, count, width)
            kept = scores[row, alone]
            ties += bool(count) and bool((scores[row, ~alone] == kept.min()).any())
    assert ties > 100  # the pick was among equal values that often


def test_topk_ignores_trailing_minus_inf_only_in_its_partial_sort_regime():
    """The fact ``top_counts`` relies on, on the CPU: with count * 64 <= width, -inf columns appended to a row leave
    topk's pick among ties as it was; below that threshold (nth_element) they can move it."""
    generator = torch.Generator().manual_seed(0)
    moved = {True: 0, False: 0}
    for _ in range(3000):
        scores, counts, widths = tied_rows(generator, 1, 700)
        count, width = counts[0], widths[0]
        if count == 0:
            continue
        alone = set(torch.topk(scores[:, :width], count).indices[0].tolist())
        padded = torch.cat([scores[:, :width], torch.full((1, 97), float("-inf"))], dim=1)
        after = set(torch.topk(padded, count).indices[0].tolist())
        moved[topk_ignores_padding(scores.device, count, width)] += alone != after
    assert moved[True] == 0 and moved[False] > 0
