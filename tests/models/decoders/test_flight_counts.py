"""Rows in flight as batched work, held as exact counts (harness/timing/op_count.py), not timings: for every decoder's
stream, 2N prompts of mixed lengths through N = 8 rows in flight against 2 prompts through 1 row (canvas 64, greedy,
tiny random native networks from benchmarks/step_ops.py), aten ops outside the network's calls per call grow at
most 2x, host reads per call stay <= 2 and bytes written by copy-like ops outside the calls per request grow at most
2x (the slot pool: no whole-cache copy when a row joins or leaves). The decoders that stop at an end of sequence run
on a network that ends each answer where its prompt's length puts it (``EndsAt``), so rows leave and join mid-flight.
The two prompts decoded alone also check that a row's tokens are the same among seven others.

benchmarks/rows_in_flight.py prints the same counts at 1, 8 and 32 rows beside the tokens/s."""

from __future__ import annotations

import pytest
import torch
from benchmarks.rows_in_flight import CONTENDERS, EndsAt, count_failures, count_flight
from benchmarks.step_ops import MASK, NETWORKS, VOCAB

CANVAS, ROWS = 64, 8
EOS = VOCAB - 2  # an id the networks can produce (EndsAt makes them); the mask is the last id
BLOCK_IDS = {"mask_id": MASK, "eos_ids": (EOS,)}
LLADA_IDS = {"mask_id": MASK, "eos_id": EOS, "eot_id": EOS - 1}
# decoder -> (network of benchmarks/step_ops.py, its config's token ids)
SETUP = {
    "ar": ("qwen3", {"eos_ids": (EOS,), "pad_id": 0}),
    "refusion": ("refusion", {"mask_id": MASK, "eos_id": EOS}),
    "sdar": ("qwen3", BLOCK_IDS),
    "fastdllm-v2": ("dream", BLOCK_IDS),
    "llada2": ("llada2", BLOCK_IDS),
    "llada2.1": ("llada2", BLOCK_IDS),
    "llada": ("llada", LLADA_IDS),
    "dream": ("dream", BLOCK_IDS),
    **{f"fastdllm-llada-{cache}": ("llada", LLADA_IDS) for cache in ("none", "prefix", "dual")},
    **{f"fastdllm-dream-{cache}": ("dream", BLOCK_IDS) for cache in ("none", "prefix", "dual")},
}


def mixed_prompts(n: int) -> list[torch.Tensor]:
    """``n`` seeded prompts of 6-23 ids (never the mask or the end of sequence); the first ones are the same for
    every ``n``."""
    g = torch.Generator().manual_seed(5)
    lengths = torch.randint(6, 24, (n,), generator=torch.Generator().manual_seed(7)).tolist()
    return [torch.randint(0, EOS, (length,), generator=g) for length in lengths]


def test_every_decoder_with_a_stream_is_counted():
    assert sorted(SETUP) == sorted(CONTENDERS)


QUICK = ("ar", "refusion")  # the others take 5-15 s each on the CPU (the counter's dispatch mode is slow)


@pytest.mark.parametrize("name", [pytest.param(name, marks=() if name in QUICK else pytest.mark.slow)
                                  for name in SETUP])
def test_rows_in_flight_stay_within_the_count_targets(name):
    contender = CONTENDERS[name]
    network_name, ids = SETUP[name]
    network = NETWORKS[network_name]()
    prompts = mixed_prompts(2 * ROWS)
    if contender.stops:  # answers end at different lengths: rows leave and join mid-flight
        network = EndsAt(network, EOS, min(len(p) for p in prompts) + CANVAS // 2, bias=200.0)
    cfg = contender.config(CANVAS, ids)
    alone = count_flight(contender, network, prompts[:2], cfg, 1)
    flying = count_flight(contender, network, prompts, cfg, ROWS)
    assert alone.counts.forwards > 0 and flying.counts.forwards > 0
    assert flying.tokens[:2] == alone.tokens
    if contender.stops:
        assert len({len(t) for t in flying.tokens}) > 1  # the rows did leave at different rounds
    assert count_failures(name, alone, flying) == []
