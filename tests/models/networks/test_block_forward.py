"""Block-causal forwards against a KVBuffer (SDAR/TraDo on the Qwen3 network, Fast-dLLM v2 on the Qwen2/Dream one),
each checked against an independent computation: the network's plain forward over the whole sequence, without a
cache, under a block-causal mask built here from positions. Prefill, peeks and commits of a batch agree with it in
fp32; a peek leaves the cache as it was; a batch's rows equal each row alone."""

from __future__ import annotations

import pytest
import torch

from harness.timing.op_count import OpCounter
from models.networks.block_forward import block_causal_mask
from models.networks.dream import DreamNetwork, tiny_fastdllm_v2_config
from models.networks.kv_buffer import KVBuffer
from models.networks.loading import build_network, load_network
from models.networks.qwen3 import Qwen3Network
from models.tiny import materialize

torch.set_num_threads(2)

BLOCK = 4
TOL = 2e-5


@pytest.fixture(scope="module", params=["tiny-sdar", "tiny-fastdllm-v2", "tied-fastdllm-v2"])
def net(request):
    if request.param == "tied-fastdllm-v2":  # the 1.5B's layout: no lm_head, logits from the embedding
        return build_network(tiny_fastdllm_v2_config(300, tied=True), seed=3)
    kind = "sdar" if request.param == "tiny-sdar" else "fastdllm-v2"
    return load_network(materialize(request.param), kind, dtype=torch.float32)


def tokens(net, rows: int, n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, net.config.vocab_size, (rows, n), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def recompute(net, ids: torch.Tensor) -> torch.Tensor:
    """Logits of the whole sequence in one plain forward, no cache: j visible to i iff j // BLOCK <= i // BLOCK."""
    pos = torch.arange(ids.shape[1])
    visible = ((pos[None, :] // BLOCK) <= (pos[:, None] // BLOCK))[None, None]
    if isinstance(net, Qwen3Network):
        return net(ids, position_ids=pos[None], attention_mask=visible)
    return net(ids, attention_bias=visible)


def positions(start: int, end: int) -> torch.Tensor:
    return torch.arange(start, end)[None]


def live(cache: KVBuffer) -> list:
    return [cache.row_kv(row) for row in range(cache.batch)]


def assert_same_cache(cache: KVBuffer, lengths: list[int], entries: list) -> None:
    assert cache.lengths == lengths
    for before, after in zip(entries, live(cache)):
        assert all(torch.equal(k0, k1) and torch.equal(v0, v1) for (k0, v0), (k1, v1) in zip(before, after))


@torch.no_grad()
def test_prefill_peeks_and_commits_equal_a_full_block_causal_recompute(net):
    rows, prefill, n_blocks = 3, 2 * BLOCK, 3
    final = tokens(net, rows, prefill + n_blocks * BLOCK, 1)
    cache = net.new_cache(rows, final.shape[1])
    out = net.block_forward(final[:, :prefill], positions(0, prefill), cache, BLOCK, write=True)
    assert (out - recompute(net, final[:, :prefill])).abs().max() < TOL
    assert cache.lengths == [prefill] * rows
    for block in range(n_blocks):
        start, end = prefill + block * BLOCK, prefill + (block + 1) * BLOCK
        for peek in range(2):  # drafts of the block, as a decoder's denoising steps see it
            draft = final[:, :end].clone()
            draft[:, start:end] = tokens(net, rows, BLOCK, 100 * block + peek)
            lengths, entries = list(cache.lengths), live(cache)
            out = net.block_forward(draft[:, start:end], positions(start, end), cache, BLOCK, write=False)
            assert (out - recompute(net, draft)[:, start:end]).abs().max() < TOL
            assert_same_cache(cache, lengths, entries)
        out = net.block_forward(final[:, start:end], positions(start, end), cache, BLOCK, write=True)
        assert (out - recompute(net, final[:, :end])[:, start:end]).abs().max() < TOL
        assert cache.lengths == [end] * rows
    # what the commits wrote is what one prefill of the whole sequence writes
    whole = net.new_cache(rows, final.shape[1])
    net.block_forward(final, positions(0, final.shape[1]), whole, BLOCK, write=True)
    for mine, theirs in zip(live(cache), live(whole)):
        for (k0, v0), (k1, v1) in zip(mine, theirs):
            assert (k0 - k1).abs().max() < TOL and (v0 - v1).abs().max() < TOL


@torch.no_grad()
def test_unaligned_entries_and_a_peek_spanning_two_blocks(net):
    """The mask comes from positions alone: 7 entries ending inside a block, 6 over two blocks after a prefill."""
    ids = tokens(net, 2, 14, 2)
    cache = net.new_cache(2, 16)
    out = net.block_forward(ids[:, :7], positions(0, 7), cache, BLOCK, write=False)
    assert (out - recompute(net, ids[:, :7])).abs().max() < TOL
    net.block_forward(ids[:, :8], positions(0, 8), cache, BLOCK, write=True)
    out = net.block_forward(ids[:, 8:], positions(8, 14), cache, BLOCK, write=False)
    assert (out - recompute(net, ids)[:, 8:]).abs().max() < TOL
    assert cache.lengths == [8, 8]


@torch.no_grad()
def test_positions_as_a_range_give_the_same_logits_and_no_host_read(net):
    """A range (what the decoder passes) is the positions every row shares, so the one-block test needs no read; the
    logits equal the tensor form's, for one block and for two (where the mask is built)."""
    ids = tokens(net, 2, 3 * BLOCK, 7)
    for span in ((BLOCK, 2 * BLOCK), (BLOCK, 3 * BLOCK), (BLOCK + 1, 3 * BLOCK)):
        out = {}
        for form in ("tensor", "range"):
            cache = net.new_cache(2, 3 * BLOCK)
            net.block_forward(ids[:, :span[0]], range(0, span[0]), cache, BLOCK, write=True)
            given = positions(*span) if form == "tensor" else range(*span)
            with OpCounter(net) as counts:
                out[form] = net.block_forward(ids[:, span[0]:span[1]], given, cache, BLOCK, write=False)
            reads = counts.read_count + sum(counts.reads_inside.values())
            assert reads == (form == "tensor"), (span, form, counts.reads, counts.reads_inside)  # the tensor's test
        assert torch.equal(out["tensor"], out["range"]), span
    with pytest.raises(ValueError, match="consecutive positions"):
        net.block_forward(ids[:, :BLOCK], range(0, 2 * BLOCK, 2), net.new_cache(2, BLOCK), BLOCK, write=True)


@torch.no_grad()
def test_the_head_at_the_cells_read_is_the_full_head_there(net):
    """``read`` (flat cells of [B * L]) gives the full forward's logits at those cells, in that order, and writes the
    cache as the full forward does; an empty ``read`` computes no head and still writes it."""
    ids = tokens(net, 2, 3 * BLOCK, 5)
    caches, outs = [], []
    for read in (None, torch.tensor([9, 0, 5, 5, 11]), torch.tensor([], dtype=torch.long)):
        cache = net.new_cache(2, 3 * BLOCK)
        net.block_forward(ids[:, :BLOCK], range(0, BLOCK), cache, BLOCK, write=True)
        outs.append(net.block_forward(ids[:, BLOCK:], range(BLOCK, 3 * BLOCK), cache, BLOCK, write=BLOCK, read=read))
        caches.append(cache)
    full, cells, nothing = outs
    torch.testing.assert_close(cells, full.flatten(0, 1)[[9, 0, 5, 5, 11]])
    assert nothing.shape == (0, full.shape[-1])
    for cache in caches[1:]:
        assert_same_cache(cache, caches[0].lengths, live(caches[0]))


@torch.no_grad()
def test_batch_rows_equal_each_row_alone(net):
    ids = tokens(net, 3, 3 * BLOCK, 4)
    cache = net.new_cache(3, 3 * BLOCK)
    net.block_forward(ids[:, :2 * BLOCK], positions(0, 2 * BLOCK), cache, BLOCK, write=True)
    batch = net.block_forward(ids[:, 2 * BLOCK:], positions(2 * BLOCK, 3 * BLOCK), cache, BLOCK, write=False)
    for row in range(3):
        alone = net.new_cache(1, 3 * BLOCK)
        net.block_forward(ids[row:row + 1, :2 * BLOCK], positions(0, 2 * BLOCK), alone, BLOCK, write=True)
        out = net.block_forward(ids[row:row + 1, 2 * BLOCK:], positions(2 * BLOCK, 3 * BLOCK), alone, BLOCK, False)
        assert (out - batch[row:row + 1]).abs().max() < TOL


@torch.no_grad()
def test_rows_of_different_lengths_see_only_their_own_entries(net):
    """Not what the lockstep decoder does, but the buffer allows it: row 1 holds one block less than row 0."""
    ids = tokens(net, 2, 3 * BLOCK, 5)
    cache = net.new_cache(2, 3 * BLOCK)
    net.block_forward(ids[:, :2 * BLOCK], positions(0, 2 * BLOCK), cache, BLOCK, write=True)
    cache.truncate(1, BLOCK)
    pos = torch.tensor([[2 * BLOCK + i for i in range(BLOCK)], [BLOCK + i for i in range(BLOCK)]])
    new = torch.stack([ids[0, 2 * BLOCK:], ids[1, BLOCK:2 * BLOCK]])
    out = net.block_forward(new, pos, cache, BLOCK, write=True)
    assert cache.lengths == [3 * BLOCK, 2 * BLOCK]
    assert (out[0] - recompute(net, ids[:1])[0, 2 * BLOCK:]).abs().max() < TOL
    assert (out[1] - recompute(net, ids[1:, :2 * BLOCK])[0, BLOCK:]).abs().max() < TOL


def test_block_causal_mask_is_none_only_for_one_block_of_equal_rows():
    cache = KVBuffer(1, 2, 16, 1, 2, torch.float32, "cpu")
    cache.lengths = [4, 4]
    with cache.claim(4, keep=False) as plan:
        assert block_causal_mask(plan, positions(4, 8), BLOCK) is None
    with cache.claim(8, keep=False) as plan:
        mask = block_causal_mask(plan, positions(4, 12), BLOCK)
        assert mask.shape == (1, 1, 8, 12) and mask[0, 0, :, :4].all()  # every cached entry
        assert mask[0, 0, 3, 8:].sum() == 0 and mask[0, 0, 4, 4:].all()  # block 1 does not see block 2; 2 sees both
    assert cache.lengths == [4, 4]


def test_bad_calls_fail_and_leave_the_cache(net):
    ids = tokens(net, 2, BLOCK, 6)
    cache = net.new_cache(2, BLOCK)
    with pytest.raises(ValueError, match="position_ids"):
        net.block_forward(ids, torch.arange(BLOCK), cache, BLOCK, write=True)
    with pytest.raises(ValueError, match="KVBuffer of 2 rows"):
        net.block_forward(ids, positions(0, BLOCK), net.new_cache(1, BLOCK), BLOCK, write=True)
    net.block_forward(ids, positions(0, BLOCK), cache, BLOCK, write=True)
    with pytest.raises(RuntimeError, match="capacity"):
        net.block_forward(ids, positions(BLOCK, 2 * BLOCK), cache, BLOCK, write=False)
    assert cache.lengths == [BLOCK, BLOCK]


def test_both_networks_offer_the_same_two_calls():
    assert Qwen3Network.block_forward is DreamNetwork.block_forward
    assert Qwen3Network.new_cache is DreamNetwork.new_cache


@torch.no_grad()
def test_a_fused_commit_keeps_the_finished_block_and_peeks_the_next(net):
    """``write`` as a count (LLaDA2's one forward per step): feeding blocks 1 and 2 and keeping block 1 leaves the
    cache a commit of block 1 would, and gives block 2 the logits of the whole-sequence recompute."""
    ids = tokens(net, 2, 3 * BLOCK, seed=5)
    fused, plain = net.new_cache(2, 3 * BLOCK), net.new_cache(2, 3 * BLOCK)
    for cache in (fused, plain):
        net.block_forward(ids[:, :BLOCK], positions(0, BLOCK), cache, BLOCK, write=True)
    out = net.block_forward(ids[:, BLOCK:], positions(BLOCK, 3 * BLOCK), fused, BLOCK, write=BLOCK)
    net.block_forward(ids[:, BLOCK:2 * BLOCK], positions(BLOCK, 2 * BLOCK), plain, BLOCK, write=True)
    assert fused.lengths == plain.lengths == [2 * BLOCK] * 2
    for (k0, v0), (k1, v1) in zip(fused.row_kv(1), plain.row_kv(1)):
        assert (k0 - k1).abs().max() < TOL and (v0 - v1).abs().max() < TOL
    assert (out[:, BLOCK:] - recompute(net, ids)[:, 2 * BLOCK:]).abs().max() < TOL
