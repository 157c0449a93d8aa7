"""The autoregressive decoder against independent computations: full recompute, unbatched runs, scripted EOS."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from models.decoders.ar import ARConfig, ar_generate


@pytest.fixture(scope="module")
def network() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, initializer_range=0.2)
    return Qwen3ForCausalLM(config).eval()


def greedy_by_full_recompute(network, prompt: list[int], steps: int) -> list[int]:
    """No cache: every step runs the whole sequence again and takes the argmax of the last row."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            x = torch.tensor([ids])
            logits = network(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits
            ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt):]


def run(network, prompts: list[list[int]], steps: int, eos=(299,), sampling=ARConfig()):
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    cfg = dataclasses.replace(sampling, max_new_tokens=steps, eos_ids=tuple(eos), pad_id=0)
    output = ar_generate(network, ids, mask, cfg)
    assert output.nfe == output.rows[0].nfe * len(prompts)
    return list(output.rows)


def test_cached_decoding_equals_full_recompute(network):
    prompt = [5, 17, 42, 8, 99, 3]
    expected = greedy_by_full_recompute(network, prompt, 24)
    (result,) = run(network, [prompt], 24, eos=(-1,))
    assert result.token_ids == expected
    assert result.nfe == 24  # one prefill plus 23 single-token steps
    assert result.hit_max_tokens


def test_batched_left_padded_equals_unbatched(network):
    prompts = [[5, 17, 42], [7, 1, 2, 3, 4, 5, 6, 8, 9], [250, 12]]
    batched = run(network, prompts, 20, eos=(-1,))
    for prompt, row in zip(prompts, batched):
        (alone,) = run(network, [prompt], 20, eos=(-1,))
        assert row.token_ids == alone.token_ids


def test_rows_stop_at_their_own_eos(network):
    prompts = [[5, 17, 42], [7, 1, 2, 3, 4]]
    free = run(network, prompts, 16, eos=(-1,))
    row0 = free[0].token_ids
    step = next(k for k in range(1, len(row0)) if row0[k] not in row0[:k])  # first new token after step 0
    eos = row0[step]
    stopped = run(network, prompts, 16, eos=(eos,))
    assert stopped[0].token_ids == row0[: step + 1]
    assert not stopped[0].hit_max_tokens
    cut = free[1].token_ids.index(eos) + 1 if eos in free[1].token_ids else 16
    assert stopped[1].token_ids == free[1].token_ids[:cut]


def test_sampling_is_seeded_and_differs_from_greedy(network):
    sampling = ARConfig(do_sample=True, temperature=1.5, top_k=50, top_p=0.95, seed=7)
    first = run(network, [[5, 17, 42]], 24, eos=(-1,), sampling=sampling)[0].token_ids
    second = run(network, [[5, 17, 42]], 24, eos=(-1,), sampling=sampling)[0].token_ids
    greedy = run(network, [[5, 17, 42]], 24, eos=(-1,))[0].token_ids
    assert first == second
    assert first != greedy
