"""``KVBuffer``'s operations on a buffer alone (one layer, one kv head of width 2): what each writes and where the
lengths go. The networks' use of them is tested with the networks (test_llada, test_dream, test_qwen3)."""

from __future__ import annotations

import pytest
import torch

from models.networks.kv_buffer import KVBuffer, SlotPool


def buffer(lengths: list[int], capacity: int = 8) -> KVBuffer:
    """A buffer whose row b holds entries whose keys are b * 100 + column (values their negation)."""
    cache = KVBuffer(1, len(lengths), capacity, 1, 2, torch.float32, "cpu")
    cols = torch.arange(capacity, dtype=torch.float32)
    for row, n in enumerate(lengths):
        cache.kv[0, 0, row, 0, :n] = (row * 100 + cols[:n, None]).expand(n, 2)
        cache.kv[0, 1, row, 0, :n] = -cache.kv[0, 0, row, 0, :n]
    cache.lengths = list(lengths)
    return cache


def entries(n: int, value: float, rows: int) -> torch.Tensor:
    """New k (or v) [rows, 1, n, 2], all ``value``."""
    return torch.full((rows, 1, n, 2), value)


def test_overwrite_writes_the_columns_in_place_and_reads_every_live_column():
    cache = buffer([6, 6])
    before = cache.kv.clone()
    plan = cache.overwrite(2, 3)
    assert (plan.index, plan.key_len, plan.uniform) == (None, 6, 2)
    keys, values = cache.store(0, plan, entries(3, 7.0, 2), entries(3, -7.0, 2))
    assert cache.lengths == [6, 6] and keys.shape == values.shape == (2, 1, 6, 2)
    assert (keys[:, :, 2:5] == 7).all() and (values[:, :, 2:5] == -7).all()
    outside = torch.ones(8, dtype=torch.bool)
    outside[2:5] = False
    assert torch.equal(cache.kv[..., outside, :], before[..., outside, :])


def test_overwrite_reads_up_to_the_longest_row_and_stays_inside_the_shortest():
    plan = buffer([7, 5]).overwrite(4, 1)
    assert (plan.key_len, plan.uniform) == (7, 4)
    for start, n in ((4, 2), (-1, 2), (0, 0)):
        with pytest.raises(ValueError, match="overwrite"):
            buffer([7, 5]).overwrite(start, n)


def test_truncate_all_trims_every_row_or_none():
    cache = buffer([6, 4])
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate_all(5)  # row 1 holds 4: row 0 is left as it was too
    assert cache.lengths == [6, 4]
    cache.truncate_all(3)
    assert cache.lengths == [3, 3]
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate_all(4)
    assert cache.lengths == [3, 3]
    cache.truncate_all(0)
    assert cache.lengths == [0, 0]


def test_a_part_over_consecutive_slots_is_a_view_and_over_scattered_slots_writes_through_the_pool():
    """Rows in flight run a forward on their slots alone: the part's entries are those slots', new entries land in
    the pool at each slot's own columns, reads come back in the part's order, and other slots are left alone."""
    cache = buffer([3, 5, 2, 4])
    for slots in ([1, 2], [3, 0]):
        before = cache.kv.clone()
        with cache.at(slots) as part:
            assert part.batch == 2 and part.lengths == [cache.lengths[s] for s in slots]
            with part.claim(2, keep=[2, 1]) as plan:
                keys, values = part.store(0, plan, entries(2, 9.0, 2), entries(2, -9.0, 2))
            for row, slot in enumerate(slots):
                n = int(plan.index[row, 0])  # the slot's entries before the forward (the rows' lengths differ)
                assert torch.equal(keys[row, :, :n], before[0, 0, slot, :, :n])  # the slot's own entries, in order
                assert (keys[row, :, n:n + 2] == 9).all()
                assert torch.equal(part.row_kv(row)[0][0][0], cache.kv[0, 0, slot, :, :part.lengths[row]])
        others = [s for s in range(4) if s not in slots]
        assert torch.equal(cache.kv[:, :, others], before[:, :, others])
        assert all((cache.kv[0, 0, s, :, :cache.lengths[s]] != 0).any() for s in slots)
    assert cache.lengths == [4, 7, 3, 6]
    with pytest.raises(ValueError, match="slots"):
        with cache.at([1, 1]):
            pass


def test_a_slot_pool_hands_out_the_lowest_free_slot_and_takes_back_only_taken_ones():
    pool = SlotPool(3)
    assert [pool.take() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="no free slot"):
        pool.take()
    pool.give(2)
    pool.give(0)
    assert pool.take() == 0
    with pytest.raises(ValueError, match="free already"):
        pool.give(2)


def test_claim_keeps_a_count_of_new_entries_per_row():
    """Rows in flight at different phases share a forward: one peeks (keeps none), one commits (keeps all), one
    keeps part; each row's new entries go after its own, and a failed forward leaves every length as it was."""
    cache = buffer([2, 4, 0])
    with cache.claim(3, keep=[0, 3, 1]) as plan:
        cache.store(0, plan, entries(3, 7.0, 3), entries(3, -7.0, 3))
    assert cache.lengths == [2, 7, 1]
    assert plan.index.tolist() == [[2, 3, 4], [4, 5, 6], [0, 1, 2]]
    assert (cache.row_kv(1)[0][0][:, :, 4:] == 7).all() and (cache.row_kv(2)[0][0] == 7).all()
    with pytest.raises(RuntimeError), cache.claim(1, keep=[1, 1, 1]):
        raise RuntimeError("the forward failed")
    assert cache.lengths == [2, 7, 1]
    for keep in ([1, 1], [0, 2, 0]):
        with pytest.raises(ValueError, match="cannot keep"), cache.claim(1, keep=keep):
            pass


def test_overwrite_takes_a_start_per_row():
    """Rows in flight at different blocks refresh each their own block's columns in one forward."""
    cache = buffer([6, 5])
    before = cache.kv.clone()
    plan = cache.overwrite([1, 3], 2)
    assert plan.index.tolist() == [[1, 2], [3, 4]] and plan.key_len == 6 and cache.lengths == [6, 5]
    cache.store(0, plan, entries(2, 7.0, 2), entries(2, -7.0, 2))
    assert (cache.kv[0, 0, 0, 0, 1:3] == 7).all() and (cache.kv[0, 0, 1, 0, 3:5] == 7).all()
    untouched = torch.ones(8, dtype=torch.bool)
    untouched[1:3] = False
    assert torch.equal(cache.kv[0, 0, 0, 0, untouched], before[0, 0, 0, 0, untouched])
    with pytest.raises(ValueError, match="cannot overwrite"):
        cache.overwrite([1, 4], 2)  # row 1 holds 5 entries
