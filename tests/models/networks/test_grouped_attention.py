"""Grouped attention (models/networks/grouped_attention.py) against one SDPA over the dense mask, and the native
Qwen3 network taking a grouped layout against transformers' ``Qwen3ForCausalLM`` given the same visibility as a
dense mask (an independent implementation); the ReFusion decoder's tokens with and without grouping."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache, Qwen3ForCausalLM

import models.networks.grouped_attention as grouped
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_rows
from models.networks.grouped_attention import (GroupedWindows, dense_mask, grouped_attention, grouping_pays,
                                               plan_grouped)
from models.networks.loading import load_network
from models.tiny import materialize
from benchmarks.common.regimes import NO_EOS, biased, make_prompts

CPU = torch.device("cpu")


def random_layout(rng: random.Random, slot: int) -> tuple[GroupedWindows, list[int]]:
    """1-4 rows, each a prefix and 2-6 groups of ``slot`` own keys split into owned entries and a window; padded
    width. Returns the layout and each row's number of real new tokens."""
    rows = []
    for _ in range(rng.randint(1, 4)):
        groups, owned, prefix = rng.randint(2, 6), rng.randint(0, slot - 1), rng.randint(1, 30)
        rows.append((prefix + groups * owned, prefix, groups, owned, slot - owned))
    width = max(g * w for *_, g, _, w in rows) + rng.randint(0, 3)
    return GroupedWindows(*map(tuple, zip(*rows)), width=width), [g * w for *_, g, _, w in rows]


@pytest.mark.parametrize("heads,kv_heads,dim", [(4, 2, 16), (2, 1, 8), (4, 4, 16), (8, 2, 32)])
def test_grouped_attention_equals_sdpa_over_the_dense_mask(heads, kv_heads, dim):
    """Rows with different prefixes (a prefix mask), owned entries or none, grouped-query heads and padded widths:
    every real query's output equals one SDPA over the dense mask to float rounding."""
    rng = random.Random(heads * 100 + dim)
    g = torch.Generator().manual_seed(heads + dim)
    for _ in range(40):
        layout, real = random_layout(rng, slot=rng.choice([2, 4, 8]))
        b, key_len = len(real), layout.key_len
        q = torch.randn(b, heads, layout.width, dim, generator=g)
        keys, values = (torch.randn(b, kv_heads, key_len + 5, dim, generator=g) for _ in range(2))  # spare columns
        expected = F.scaled_dot_product_attention(q, keys[:, :, :key_len], values[:, :, :key_len],
                                                  attn_mask=dense_mask(layout, CPU), enable_gqa=heads != kv_heads)
        got = grouped_attention(q, keys, values, plan_grouped(layout, heads, kv_heads, torch.float32, CPU))
        for row, n in enumerate(real):
            assert (got[row, :, :n] - expected[row, :, :n]).abs().max() < 2e-6


def test_the_grouped_form_skips_the_other_groups():
    """A value planted in another group's columns changes the dense result only through the mask: with both forms
    equal, moving it must leave a group's output unchanged, and moving a value of its own must change it."""
    layout = GroupedWindows((10,), (4,), (3,), (2,), (3,), 9)
    g = torch.Generator().manual_seed(0)
    q, keys, values = torch.randn(1, 2, 9, 8, generator=g), torch.randn(1, 1, 19, 8, generator=g), \
        torch.randn(1, 1, 19, 8, generator=g)
    plan = plan_grouped(layout, 2, 1, torch.float32, CPU)
    before = grouped_attention(q, keys, values, plan)
    other, own = values.clone(), values.clone()
    other[:, :, 6:8] += 100.0  # group 1's owned entries (columns 4 + 2*1 ...)
    own[:, :, 4:6] += 100.0  # group 0's owned entries
    assert torch.equal(grouped_attention(q, keys, other, plan)[:, :, 0:3], before[:, :, 0:3])
    assert (grouped_attention(q, keys, own, plan)[:, :, 0:3] - before[:, :, 0:3]).abs().max() > 1.0


def test_layouts_that_do_not_fit_fail_in_one_line():
    with pytest.raises(ValueError, match="row 0: 3 groups of 3 new tokens owning 2 entries"):
        GroupedWindows((9,), (4,), (3,), (2,), (3,), 9)  # 4 + 3*2 = 10 cached entries, not 9
    with pytest.raises(ValueError, match="with a prefix of 4 and 8 new tokens"):
        GroupedWindows((10,), (4,), (3,), (2,), (3,), 8)  # 9 window tokens do not fit 8


def test_grouping_pays_only_on_the_cpu_for_split_rows_with_enough_skipped_scores():
    big = GroupedWindows((600,), (600,), (64,), (0,), (8,), 512)  # 63 other slots' 8 columns for 512 queries
    assert grouping_pays(big, 4, CPU)
    assert not grouping_pays(big, 4, torch.device("meta"))
    mixed = GroupedWindows((600, 600), (600, 600), (64, 1), (0, 0), (8, 512), 512)  # a plain row in the batch
    assert not grouping_pays(mixed, 4, CPU)
    small = GroupedWindows((100,), (100,), (8,), (0,), (8,), 64)
    assert not grouping_pays(small, 4, CPU)


@pytest.fixture(scope="module")
def tiny_pair():
    folder = materialize("tiny-refusion")
    return (Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(),
            load_network(folder, "qwen3", dtype=torch.float32))


@torch.no_grad()
def test_network_with_a_grouped_layout_matches_transformers(tiny_pair, monkeypatch):
    """The native network attending group by group (forced) on a cache of two rows of different lengths gives
    transformers' logits for the same visibility given as a dense mask over the same cache, row by row."""
    monkeypatch.setattr(grouped, "MIN_SKIPPED_SCORES", 0)
    hf, net = tiny_pair
    g = torch.Generator().manual_seed(5)
    prefixes, groups, owned, window = [7, 12], 3, [2, 1], [3, 4]
    layout = GroupedWindows(tuple(p + groups * o for p, o in zip(prefixes, owned)), tuple(prefixes), (groups,) * 2,
                            tuple(owned), tuple(window), 12)
    assert grouping_pays(layout, hf.config.num_attention_heads, CPU)
    cached = [torch.randint(0, 500, (n,), generator=g) for n in layout.lengths]
    new = torch.randint(0, 500, (2, layout.width), generator=g)
    positions = torch.randint(0, 300, (2, layout.width), generator=g)
    cache = net.new_cache(2, 64)
    for row, ids in enumerate(cached):  # each row's cache, written alone
        single = net.new_cache(1, 64)
        net(ids[None], cache=single)
        cache.kv[:, :, row, :, :ids.shape[0]] = single.kv[:, :, 0, :, :ids.shape[0]]
    cache.lengths = list(layout.lengths)
    mine = net(new, position_ids=positions, attention_mask=layout, cache=cache)
    mask = dense_mask(layout, CPU)
    for row, ids in enumerate(cached):
        hf_cache = DynamicCache(config=hf.config)
        hf(input_ids=ids[None], cache=hf_cache, use_cache=True)
        n = layout.groups[row] * layout.window[row]
        theirs = hf(input_ids=new[row:row + 1, :n], position_ids=positions[row:row + 1, :n], cache=hf_cache,
                    attention_mask=mask[row:row + 1, :, :n, :ids.shape[0] + n]).logits
        assert (mine[row, :n] - theirs[0]).abs().max() < 1e-5


@torch.no_grad()
def test_refusion_tokens_are_the_same_grouped_or_dense(monkeypatch):
    """Canvas 512 at 90% acceptance (every in-slot pass has dozens of slots): the decoder's tokens and forward counts
    with every in-slot forward grouped equal those with none grouped, alone and in a batch."""
    folder = materialize("tiny-refusion")
    inner = load_network(folder, "qwen3", dtype=torch.float32)
    mask_id = json.loads((folder / "config.json").read_text())["mask_token_id"]
    network = biased(inner, "90%", 4096, inner.config.vocab_size, mask_id)
    cfg = RefusionConfig(gen_length=512, slot_size=8, serial_num_blocks=2, mask_id=mask_id, eos_id=NO_EOS)
    prompts = make_prompts(3)
    runs = {}
    for threshold in (0, 1 << 62):
        monkeypatch.setattr(grouped, "MIN_SKIPPED_SCORES", threshold)
        runs[threshold] = [[(t.token_ids, t.nfe) for t in refusion_decode_rows(network, [p], cfg)] for p in prompts]
        runs[threshold].append([(t.token_ids, t.nfe) for t in refusion_decode_rows(network, prompts[:2], cfg)])
    assert runs[0] == runs[1 << 62]
