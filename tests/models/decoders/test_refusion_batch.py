"""Batched ReFusion: every row's tokens equal its batch-1 decode (scripted network without ties, and a real tiny
network), rows of different lengths finish at different rounds and leave the batch, forwards split per the harness's
batched rule; torch.compile of the native network is token-identical to eager."""

from __future__ import annotations

import math

import pytest
import torch

from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row, refusion_decode_rows, refusion_generate
from models.decoders.refusion.requests import (InSlot, Plan, Request, SlotDraft, SlotVerify, Verify, plan_reads,
                                               request_windows)
from models.networks.grouped_attention import dense_mask
from models.networks.kv_buffer import KVBuffer
from refusion_stubs import NudgedNative, native_copy, tiny_qwen

torch.set_num_threads(2)

VOCAB, MASK, EOS = 40, 39, 38


class ScriptedNative(torch.nn.Module):
    """Native-signature scripted network: a MASK at p proposes target[p] with plan_conf[p]; target[p] at p proposes
    target[p+1] with ar_conf[p+1]. Confidences are far from every threshold, so no near-tie can flip a decision.
    Its KVBuffer stores (token, position) so each call checks the row's live cache: no mask id, no position twice."""

    def __init__(self, n: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.target = [int(t) for t in torch.randint(0, VOCAB - 3, (n,), generator=g)]
        for p in range(20, n, 23):
            self.target[p] = EOS
        self.plan_conf = [0.97 if c else 0.3 for c in (torch.rand(n, generator=g) > 0.4).tolist()]
        self.ar_conf = [0.97 if c else 0.3 for c in (torch.rand(n, generator=g) > 0.25).tolist()]
        self.calls = 0

    def new_cache(self, batch: int, capacity: int) -> KVBuffer:
        return KVBuffer(1, batch, capacity, 1, 2, torch.float32, "cpu")

    def _row(self, token: int, p: int) -> torch.Tensor:
        if token == MASK:
            want, prob = self.target[p], self.plan_conf[p]
        elif token == self.target[p]:
            want, prob = self.target[p + 1], self.ar_conf[p + 1]
        else:
            return torch.zeros(VOCAB).index_fill_(0, torch.tensor([MASK]), -80.0)
        row = torch.full((VOCAB,), math.log((1 - prob) / (VOCAB - 2)))
        row[want], row[MASK] = math.log(prob), -80.0
        return row

    def forward(self, input_ids, position_ids, attention_mask=None, cache=None, logits_to_keep=0, ragged=None):
        self.calls += 1
        b, q = input_ids.shape
        before = list(cache.lengths)
        plan = cache.reserve(q)
        kv = torch.stack([input_ids.float(), position_ids.float()], -1)[:, None]
        cache.store(0, plan, kv, kv)
        for r in range(b):
            live = cache.keys[0][r, 0, :before[r]]
            assert not (live[:, 0] == MASK).any(), "a mask id was left in the cache"
            assert live[:, 1].unique().numel() == before[r], "a position is cached twice"
        logits = torch.stack([torch.stack([self._row(t, p) for t, p in zip(ids, pos)])
                              for ids, pos in zip(input_ids.tolist(), position_ids.tolist())])
        if ragged is not None:
            return ragged.take(logits)
        return logits[:, -logits_to_keep:] if logits_to_keep else logits


def cfg(**kw) -> RefusionConfig:
    base = dict(gen_length=32, slot_size=4, serial_num_blocks=2, slot_threshold=0.9, token_threshold=0.9,
                mask_id=MASK, eos_id=EOS)
    return RefusionConfig(**{**base, **kw})


def prompts(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB - 3, (n,), generator=g) for n in lengths]


@pytest.mark.parametrize("overrides", [dict(), dict(slot_threshold=0.5, token_threshold=0.5, serial_num_blocks=1),
                                       dict(slot_size=2, gen_length=24, serial_num_blocks=3)])
def test_scripted_batch_rows_equal_batch_one(overrides):
    net = ScriptedNative(120, seed=3)
    c = cfg(**overrides)
    batch = prompts([3, 9, 5, 14, 1, 7])
    singles = [refusion_decode_row(net, p[None], c) for p in batch]
    net.calls = 0
    together = refusion_decode_rows(net, batch, c)
    assert [o.token_ids for o in together] == [o.token_ids for o in singles]
    assert [o.iterations for o in together] == [o.iterations for o in singles]
    assert [o.commit_step for o in together] == [o.commit_step for o in singles]
    assert [o.hit_max_tokens for o in together] == [o.hit_max_tokens for o in singles]
    own = [o.nfe for o in singles]
    assert len(set(own)) > 1, "rows should finish at different rounds"
    assert any(not o.hit_max_tokens for o in singles), "some rows should stop at an end-of-sequence"
    # one forward per round for the rows still running: as many forwards as the longest row needs
    assert net.calls == max(own)
    # each forward is split evenly across the rows it ran: the per-row shares add up to the forwards run
    assert sum(o.nfe for o in together) == pytest.approx(net.calls)
    assert all(t.nfe <= s.nfe for t, s in zip(together, singles))


@pytest.mark.parametrize("max_rows, requests",
                         [(1, 7), (2, 7), (4, 7), pytest.param(32, 40, marks=pytest.mark.slow)])
def test_rows_in_flight_take_the_next_prompt_as_one_finishes(max_rows, requests):
    """``max_rows``: as a row finishes it frees its cache row and a later prompt takes it (its first request in a
    forward of its own beside the round's), so each row decodes as alone, and a round runs every row still busy
    until no prompt waits: at most the busy rows' own forwards in total, never more than ``max_rows`` at once. The
    stream holds one cache of ``max_rows`` rows, which rows join and leave without moving it."""
    from models.decoders.refusion.decoder import refusion_rounds

    net = ScriptedNative(120, seed=3)
    c = cfg()
    batch = prompts([3, 9, 5, 14, 1, 7, 4] + [1 + 5 * i % 14 for i in range(requests - 7)])
    singles = [refusion_decode_row(net, p[None], c) for p in batch]
    widths, caches, memory = [], [], set()

    def counted(input_ids, *args, _forward=net.forward, **kwargs):
        widths.append(input_ids.shape[0])
        memory.add(kwargs["cache"].kv.untyped_storage().data_ptr())
        return _forward(input_ids, *args, **kwargs)

    net.forward = counted
    net.new_cache = lambda *args, _new=net.new_cache: caches.append(_new(*args)) or caches[-1]
    rows = refusion_decode_rows(net, batch, c, max_rows=max_rows)
    assert [cache.batch for cache in caches] == [max_rows] and len(memory) == 1  # one cache, never copied
    assert [o.token_ids for o in rows] == [o.token_ids for o in singles]
    assert [o.iterations for o in rows] == [o.iterations for o in singles]
    assert [o.commit_step for o in rows] == [o.commit_step for o in singles]
    assert max(widths) <= max_rows and sum(widths) == sum(o.nfe for o in singles)
    assert sum(o.nfe for o in rows) == pytest.approx(len(widths))
    calls, widths[:] = len(widths), []
    rounds = list(refusion_rounds(net, batch, c, max_rows=max_rows))
    joining = sum(1 for r in rounds if r.started and len(r.started) < r.rows)  # a second forward those rounds
    assert calls == len(widths) == len(rounds) + joining
    if max_rows == 1:
        assert len(rounds) == sum(o.nfe for o in singles)
    else:  # the batch stays full while prompts wait: fewer rounds than static batches of max_rows
        static = sum(max(o.nfe for o in singles[i:i + max_rows]) for i in range(0, len(batch), max_rows))
        assert len(rounds) < static if max_rows == 2 else len(rounds) <= static


def test_rows_in_flight_must_be_positive():
    with pytest.raises(ValueError, match="max_rows must be at least 1"):
        refusion_decode_rows(ScriptedNative(120, seed=3), prompts([3]), cfg(), max_rows=0)


def test_tiny_network_batch_rows_equal_batch_one():
    answer = torch.randint(0, 95, (80,), generator=torch.Generator().manual_seed(0)).tolist()
    net = NudgedNative(native_copy(tiny_qwen(vocab=96, seed=1, sharpness=25.0)), 95, answer, 15.0)
    c = RefusionConfig(gen_length=32, slot_size=4, serial_num_blocks=2, slot_threshold=0.6, token_threshold=0.6,
                       mask_id=95, eos_id=answer[22])
    batch = [torch.randint(0, 94, (n,), generator=torch.Generator().manual_seed(n)) for n in (5, 11, 2, 8)]
    singles = [refusion_decode_row(net, p[None], c) for p in batch]
    together = refusion_decode_rows(net, batch, c)
    assert [o.token_ids for o in together] == [o.token_ids for o in singles]
    assert len({o.nfe for o in singles}) > 1


@pytest.mark.slow
def test_tiny_network_rows_in_flight_equal_batch_one():
    """A real network's rows in flight, more requests than rows: a request prefilled into the cache row another
    left (its entries still there past the new row's length) decodes as alone, seeded sampling included."""
    answer = torch.randint(0, 95, (80,), generator=torch.Generator().manual_seed(0)).tolist()
    net = NudgedNative(native_copy(tiny_qwen(vocab=96, seed=1, sharpness=25.0)), 95, answer, 15.0)
    c = RefusionConfig(gen_length=32, slot_size=4, serial_num_blocks=2, slot_threshold=0.6, token_threshold=0.6,
                       mask_id=95, eos_id=answer[22], temperature=0.5)
    batch = [torch.randint(0, 94, (1 + 5 * n % 17,), generator=torch.Generator().manual_seed(n)) for n in range(36)]
    seeds = list(range(36))
    singles = [refusion_decode_rows(net, [p], c, row_seeds=[seed])[0] for p, seed in zip(batch, seeds)]
    assert len({o.forwards for o in singles}) > 2, "rows should finish at different rounds"
    for max_rows in (3, 32):
        rows = refusion_decode_rows(net, batch, c, row_seeds=seeds, max_rows=max_rows)
        assert [o.token_ids for o in rows] == [o.token_ids for o in singles]
        assert [o.commit_step for o in rows] == [o.commit_step for o in singles]
        assert [o.forwards for o in rows] == [o.forwards for o in singles]


@pytest.mark.slow
def test_compiled_native_network_is_token_identical_to_eager():
    answer = torch.randint(0, 95, (80,), generator=torch.Generator().manual_seed(0)).tolist()
    inner = native_copy(tiny_qwen(vocab=96, seed=1, sharpness=25.0))
    net = NudgedNative(inner, 95, answer, 15.0)
    c = RefusionConfig(gen_length=16, slot_size=4, serial_num_blocks=1, slot_threshold=0.6, token_threshold=0.6,
                       mask_id=95, eos_id=10_000)
    # One row: each further call pattern (batch size, padding mask) costs another graph of ~15 s of CPU compile,
    # and rows batched together are checked against batch 1 in eager above.
    batch = [torch.randint(0, 94, (9,), generator=torch.Generator().manual_seed(9))]
    eager = refusion_decode_rows(net, batch, c)
    compiled = refusion_decode_rows(torch.compile(net, dynamic=True), batch, c)
    assert [o.token_ids for o in compiled] == [o.token_ids for o in eager]
    assert [o.nfe for o in compiled] == [o.nfe for o in eager]


def test_contract_decodes_a_left_padded_batch_together():
    """``refusion_generate`` (the decoder contract) on a native network: rows as decoded alone, one forward per round
    for the whole batch, counted once in the batch's nfe and split across rows in theirs."""
    net = ScriptedNative(120, seed=3)
    c = cfg(slot_threshold=0.5, token_threshold=0.5)
    batch = prompts([3, 9, 5])
    singles = [refusion_decode_row(net, p[None], c) for p in batch]
    width = max(p.shape[0] for p in batch)
    ids = torch.stack([torch.cat([torch.zeros(width - p.shape[0], dtype=torch.long), p]) for p in batch])
    mask = torch.stack([torch.arange(width) >= width - p.shape[0] for p in batch]).long()
    net.calls = 0
    out = refusion_generate(net, ids, mask, c)
    assert [r.token_ids for r in out.rows] == [s.token_ids for s in singles]
    assert [r.hit_max_tokens for r in out.rows] == [s.hit_max_tokens for s in singles]
    assert out.nfe == net.calls == max(s.nfe for s in singles)
    assert sum(r.nfe for r in out.rows) == pytest.approx(out.nfe)
    assert [t.iterations for t in out.trace] == [s.iterations for s in singles]
    assert [r.commit_step for r in out.rows] == [s.commit_step for s in singles]


def test_decoding_builds_no_autograd_graph():
    """The decoder runs under no_grad however it is called: the cached keys of a network whose weights require
    grad stay plain tensors (the harness calls the decoder contract without a grad context of its own)."""
    net = native_copy(tiny_qwen(vocab=96, seed=1, sharpness=25.0))
    assert any(p.requires_grad for p in net.parameters())
    c = RefusionConfig(gen_length=16, slot_size=4, serial_num_blocks=1, mask_id=95, eos_id=10_000)
    ids = torch.randint(0, 94, (2, 7), generator=torch.Generator().manual_seed(3))
    events = []
    refusion_decode_rows(net, list(ids), c, on_commit=events.append)
    refusion_generate(net, ids, None, c)
    assert events and not any(k.requires_grad or v.requires_grad for e in events for k, v in e.kv)
    assert torch.is_grad_enabled()


def naive_visibility(req: Request, length: int, width: int, key_len: int) -> list[list[bool]]:
    """The in-slot visibility rule, one query and key at a time (``InSlot``'s docstring), for the dense mask of
    ``request_windows``."""
    n_new = len(req.ids)
    window, committed, owned = (req.window, req.committed, req.owned) if isinstance(req, InSlot) else (n_new, length, 1)
    rows = []
    for q in range(width):
        real = q < n_new
        row = []
        for c in range(key_len):
            j = c - length
            if c < committed:
                row.append(True)
            elif c < length:
                row.append(real and (c - committed) // owned == q // window)
            elif j < n_new:
                row.append(real and j // window == q // window and j <= q)
            elif j < width:  # a pad: seen by pad queries only, so no real query sees it
                row.append(not real and j <= q)
            else:
                row.append(False)
        rows.append(row)
    return rows


def test_dense_mask_follows_the_visibility_rule():
    """Rows in different phases (plain causal, in-slot windows with and without owned tail entries), different
    cache lengths and padding, against the rule evaluated entry by entry."""
    reqs = [Plan([0] * 6, [0] * 6, slot_size=2, slot_threshold=0.5),
            SlotDraft([0] * 8, [0] * 8, window=4, committed=9, owned=3),
            SlotVerify([0] * 9, [0] * 9, window=3, committed=5, owned=0, token_threshold=0.5),
            Verify([0] * 2, [0] * 2, run=2, token_threshold=0.5)]
    lengths = [4, 15, 5, 20]
    width = max(len(r.ids) for r in reqs)
    key_len = max(lengths) + width
    expected = torch.tensor([naive_visibility(r, n, width, key_len) for r, n in zip(reqs, lengths)])[:, None]
    assert torch.equal(dense_mask(request_windows(reqs, lengths, width), torch.device("cpu")), expected)


def test_each_request_kind_reads_its_own_cells():
    """One forward of every kind: a plan drafts its masks (not the prompt fed with it) and reads each slot's first
    token; an in-slot draft drafts every token; both verifies score every token but the first of each run, from the
    cell before it. A request of no kind has nothing to read."""
    reqs = [Plan([5, 6, 0, 0, 0, 0], list(range(6)), slot_size=2, slot_threshold=0.5, prompt_len=2),
            SlotDraft([0, 0, 0], [0, 1, 2], window=3, committed=4, owned=0),
            Verify([1, 2, 3, 4], [0, 1, 2, 3], run=2, token_threshold=0.25),
            SlotVerify([7, 8, 9, 10], [0, 1, 2, 3], window=2, committed=4, owned=1, token_threshold=0.25)]
    plan = plan_reads(reqs)
    assert plan.shares == [(4, 2, 0), (3, 0, 0), (0, 0, 2), (0, 0, 2)]
    assert list(zip(plan.rows, plan.columns)) == [(0, 2), (0, 3), (0, 4), (0, 5), (1, 0), (1, 1), (1, 2),
                                                  (2, 0), (2, 2), (3, 0), (3, 2)]
    assert plan.firsts == [0, 2] and plan.tokens == [2, 4, 8, 10]
    assert (plan.slot_thresholds, plan.token_thresholds) == ({0.5}, {0.25})
    with pytest.raises(TypeError):
        plan_reads([Request([0], [0])])


def test_stream_reports_each_round_and_each_prompt_once():
    """``refusion_stream`` (the harness's rows in flight): a prompt is admitted once, before its first round, and
    finished once, with its decode alone's tokens and forwards; no round runs more than ``max_rows`` rows."""
    from models.decoders.refusion.decoder import refusion_stream

    net, c = ScriptedNative(120, seed=3), cfg()
    batch = prompts([3, 9, 5, 14, 1, 7, 4])
    singles = [refusion_decode_row(net, p[None], c) for p in batch]
    admitted, finished, in_flight = [], {}, set()
    for step in refusion_stream(net, batch, c, 3):
        admitted += step.admitted
        in_flight |= set(step.admitted)
        assert step.rows == len(in_flight) <= 3
        for i, result in step.finished:
            assert i in in_flight and i not in finished
            finished[i] = result
            in_flight.remove(i)
    assert sorted(admitted) == list(range(len(batch))) and not in_flight
    assert [finished[i].token_ids for i in range(len(batch))] == [o.token_ids for o in singles]
    assert [finished[i].forwards for i in range(len(batch))] == [o.forwards for o in singles]
