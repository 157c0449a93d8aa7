"""ReFusion decoder: the invariants of docs/decoders.md §1, the two fixed defects (1.6a, 1.6h), validation.

Independent computations used as references: full forwards without a cache over the reordered buffer, and the
algorithm written out again from the spec (both in refusion_recompute.py), and ``ScriptedLM`` networks whose
answers are known by construction. The published decoder itself: test_refusion_published.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import DynamicCache

from models.decoders.contract import ConfigError
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row, refusion_generate, validate_refusion_config
from refusion_recompute import Tracker, full_forward, grow_visibility, reference_refusion
from refusion_stubs import NudgedLM, NudgedNative, ScriptedLM, native_copy, tiny_qwen

torch.set_num_threads(2)

VOCAB, MASK = 96, 95
NO_EOS = 10_000  # an id the network can never produce


def config(**overrides) -> RefusionConfig:
    base = dict(gen_length=32, slot_size=4, serial_num_blocks=2, mask_id=MASK, eos_id=NO_EOS)
    return RefusionConfig(**{**base, **overrides})


def make_prompt(n: int = 6, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, MASK - 1, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model():
    return tiny_qwen(vocab=VOCAB, seed=0, sharpness=60.0)


# ---- validation ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, needle", [
    (dict(gen_length=36), "gen_length=36 does not split into 2 serial blocks of whole 4-token slots"),
    (dict(gen_length=24, serial_num_blocks=4), "multiple of slot_size*serial_num_blocks=16"),
    (dict(slot_size=0), ">= 1"),
    (dict(serial_num_blocks=0), ">= 1"),
    (dict(slot_threshold=1.5), "slot_threshold must be a number in [0, 1]"),
    (dict(token_threshold=-0.1), "token_threshold must be a number in [0, 1]"),
    (dict(temperature=-1.0), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(eos_id=MASK), "distinct"),
    (dict(gen_length=32.0), "gen_length must be an integer"),
    (dict(seed="7"), "seed"),
])
def test_invalid_configs_raise_one_line(overrides, needle):
    with pytest.raises(ConfigError) as err:
        validate_refusion_config(config(**overrides))
    message = str(err.value)
    assert needle in message and "\n" not in message


def test_valid_config_and_bad_prompt(model):
    validate_refusion_config(RefusionConfig(gen_length=512))  # the defaults: 512 = 2 blocks x 32 slots x 8
    validate_refusion_config(config(slot_threshold=1.0, token_threshold=0.0))
    with pytest.raises(ValueError, match=r"shape \[1, P\]"):
        refusion_decode_row(model, torch.zeros(2, 3, dtype=torch.long), config())
    with pytest.raises(ValueError, match="torch.long"):
        refusion_decode_row(model, torch.zeros(1, 3, dtype=torch.int32), config())
    with pytest.raises(ConfigError):
        refusion_decode_row(model, make_prompt(), config(gen_length=30))


# ---- 1: cache equivalence -----------------------------------------------------------------------------------------
def test_incremental_cache_equals_full_recompute_with_unsorted_positions(model):
    tokens = make_prompt(14, seed=3)[0].tolist()
    positions = [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 20, 21]  # prompt, then slots out of order
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([tokens[:4]]), position_ids=torch.tensor([positions[:4]]), cache=cache, use_cache=True)
    # a chunk fed then dropped again (the plan pass) must leave no trace
    model(input_ids=torch.tensor([[MASK] * 6]), position_ids=torch.tensor([[8, 9, 10, 11, 30, 31]]), cache=cache,
          use_cache=True)
    cache.crop(-6)
    for lo, hi in [(4, 8), (8, 12)]:
        model(input_ids=torch.tensor([tokens[lo:hi]]), position_ids=torch.tensor([positions[lo:hi]]), cache=cache,
              use_cache=True)
    chunk = model(input_ids=torch.tensor([tokens[12:]]), position_ids=torch.tensor([positions[12:]]), cache=cache,
                  use_cache=True).logits[0]
    reference, ref_cache = full_forward(model, tokens, positions)
    assert torch.allclose(chunk, reference[12:], atol=1e-5)
    for mine, theirs in zip(cache.layers, ref_cache.layers):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-5)
        assert torch.allclose(mine.values, theirs.values, atol=1e-5)
    # and the positions matter: the same tokens in sorted positions give different logits
    sorted_logits, _ = full_forward(model, tokens, sorted(positions))
    assert (sorted_logits[12:] - reference[12:]).abs().max() > 1e-3


def test_decoder_cache_equals_full_recompute_of_reordered_buffer(model):
    prompt = make_prompt()
    cfg = config(slot_threshold=1.0, token_threshold=0.0)  # one slot per round, always committed by verification
    tracker = Tracker(prompt.shape[1], cfg.gen_length)
    refusion_decode_row(model, prompt, cfg, on_commit=tracker)
    assert any(list(e.positions) != sorted(e.positions) for e in tracker.events), "buffer never left position order"
    for event, kv in zip(tracker.events, tracker.kv):
        assert event.path == "verify"
        tokens, positions = list(event.tokens), list(event.positions)
        _, ref_cache = full_forward(model, tokens, positions)  # plain causal recompute, 2D mask of ones
        for (k, v), theirs in zip(kv, ref_cache.layers):
            assert torch.allclose(k, theirs.keys, atol=1e-5) and torch.allclose(v, theirs.values, atol=1e-5)
    # logits of a new chunk on top of the final cache equal the full recompute's last rows
    last = tracker.events[-1]
    cache = DynamicCache(config=model.config)
    for layer, (k, v) in enumerate(tracker.kv[-1]):
        cache.update(k.clone(), v.clone(), layer)
    probe_tok, probe_pos = [MASK] * 3, [3, 40, 41]
    cached = model(input_ids=torch.tensor([probe_tok]), position_ids=torch.tensor([probe_pos]), cache=cache,
                   use_cache=True).logits[0]
    full, _ = full_forward(model, list(last.tokens) + probe_tok, list(last.positions) + probe_pos)
    assert torch.allclose(cached, full[-3:], atol=1e-5)


# ---- 2: per-slot K/V in the parallel path -------------------------------------------------------------------------
def test_parallel_commit_keeps_each_slots_own_kv(model):
    prompt = make_prompt()
    cfg = config(slot_threshold=0.0, token_threshold=1.0)  # every slot chosen, completed in parallel
    tracker = Tracker(prompt.shape[1], cfg.gen_length)
    refusion_decode_row(model, prompt, cfg, on_commit=tracker)
    assert [e.path for e in tracker.events] == ["parallel", "parallel"]
    visible = torch.ones(prompt.shape[1], prompt.shape[1]).tril().bool()
    for event, kv in zip(tracker.events, tracker.kv):
        base = len(event.tokens) - event.n_new
        k = event.n_new // cfg.slot_size
        assert k >= 2
        tokens, positions = list(event.tokens), list(event.positions)
        for i in range(k):
            lo, hi = base + i * cfg.slot_size, base + (i + 1) * cfg.slot_size
            own = grow_visibility(visible, [cfg.slot_size])
            _, ref = full_forward(model, tokens[:base] + tokens[lo:hi], positions[:base] + positions[lo:hi], own)
            for (key, val), theirs in zip(kv, ref.layers):
                assert torch.allclose(key[:, :, lo:hi], theirs.keys[:, :, base:], atol=1e-5)
                assert torch.allclose(val[:, :, lo:hi], theirs.values[:, :, base:], atol=1e-5)
        # a joint causal recompute (siblings attending to each other) is NOT what the cache holds
        _, joint = full_forward(model, tokens, positions, grow_visibility(visible, [event.n_new]))
        second = slice(base + cfg.slot_size, base + 2 * cfg.slot_size)  # layer 0 keys see no context: use the last
        assert (kv[-1][0][:, :, second] - joint.layers[-1].keys[:, :, second]).abs().max() > 1e-3
        visible = grow_visibility(visible, [cfg.slot_size] * k)


# ---- the whole algorithm against the independent reference --------------------------------------------------------
ANSWER = torch.randint(0, MASK, (80,), generator=torch.Generator().manual_seed(0)).tolist()


def nudged(strength: float, native: bool = False) -> torch.nn.Module:
    """A random network pulled toward ANSWER: verification then accepts whole slots some of the time, not always."""
    inner = tiny_qwen(vocab=VOCAB, seed=1, sharpness=25.0)
    if native:
        inner = native_copy(inner)
        return NudgedNative(inner, MASK, ANSWER, strength) if strength else inner
    return NudgedLM(inner, MASK, ANSWER, strength) if strength else inner


@pytest.mark.parametrize("strength, overrides", [
    (15.0, dict()),
    (15.0, dict(slot_threshold=0.5, token_threshold=0.5)),
    (17.0, dict(slot_threshold=0.7, token_threshold=0.3, slot_size=8, gen_length=48, serial_num_blocks=3)),
    (17.0, dict(slot_threshold=0.6, token_threshold=0.6, eos_id=ANSWER[20])),
    (12.0, dict(slot_threshold=0.3, token_threshold=0.05, eos_id=ANSWER[12], slot_size=2, gen_length=24,
                serial_num_blocks=1)),
    (0.0, dict(slot_threshold=0.5, token_threshold=0.05)),
])
@pytest.mark.parametrize("network", ["transformers", "native"])
def test_matches_reference_algorithm(strength, overrides, network):
    """Both cache paths against the reference recomputed with transformers' network (the native one only decodes)."""
    model = nudged(strength)
    decoder_model = nudged(strength, native=True) if network == "native" else model
    cfg = config(**overrides)
    paths = set()
    for seed in (1, 2):
        prompt = make_prompt(5, seed=seed)
        tracker = Tracker(prompt.shape[1], cfg.gen_length)
        out = refusion_decode_row(decoder_model, prompt, cfg, on_commit=tracker)
        ids, nfe, tpf = reference_refusion(model, prompt, cfg)
        assert out.token_ids == ids
        assert out.nfe == nfe
        assert out.tokens_per_forward == pytest.approx(tpf)
        paths |= {e.path for e in tracker.events}
        # the decoder's final cache is the recompute of its buffer with the recorded visibility
        _, ref_cache = full_forward(model, list(tracker.events[-1].tokens), list(tracker.events[-1].positions),
                                    tracker.visible)
        for (k, v), theirs in zip(tracker.kv[-1], ref_cache.layers):
            assert torch.allclose(k, theirs.keys, atol=1e-4) and torch.allclose(v, theirs.values, atol=1e-4)
    if strength >= 15.0:
        assert paths == {"verify", "parallel"}, "this case should exercise both commit paths"


# ---- 3/4: buffer invariants and output order ----------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [
    dict(slot_threshold=0.5, token_threshold=0.05),
    dict(slot_threshold=0.9, token_threshold=0.9, slot_size=8),
    dict(slot_threshold=0.0, token_threshold=0.5, serial_num_blocks=4),
])
def test_invariants_and_full_canvas_without_eos(model, overrides):
    prompt = make_prompt()
    cfg = config(**overrides)
    tracker = Tracker(prompt.shape[1], cfg.gen_length)
    out = refusion_decode_row(model, prompt, cfg, on_commit=tracker)
    final = tracker.events[-1]
    assert sorted(final.positions) == list(range(prompt.shape[1] + cfg.gen_length))
    order = sorted(range(len(final.positions)), key=final.positions.__getitem__)
    assert out.token_ids == [final.tokens[i] for i in order][prompt.shape[1]:]
    assert len(out.token_ids) == cfg.gen_length == out.committed_tokens
    assert out.hit_max_tokens and MASK not in out.token_ids


# ---- 5: zero thresholds = one-step MDM per serial block -----------------------------------------------------------
def test_zero_thresholds_are_one_step_mdm_per_block(model):
    prompt = make_prompt()
    cfg = config(slot_threshold=0.0, token_threshold=0.0, serial_num_blocks=2)
    out = refusion_decode_row(model, prompt, cfg)
    assert out.nfe == 2 * cfg.serial_num_blocks
    block = cfg.gen_length // cfg.serial_num_blocks
    assert out.tokens_per_forward == cfg.slot_size * (block // cfg.slot_size) / 2
    tokens, p = prompt[0].tolist(), prompt.shape[1]
    expected = []
    for b in range(cfg.serial_num_blocks):
        logits, _ = full_forward(model, tokens + expected + [MASK] * block, list(range(p + (b + 1) * block)))
        expected += logits[-block:].argmax(-1).tolist()
    assert out.token_ids == expected


# ---- 6: threshold extremes ----------------------------------------------------------------------------------------
def scripted(n_positions: int, plan_conf: float = 0.95, ar_conf: float = 0.95, vocab: int = 32) -> ScriptedLM:
    target = [(7 * q + 3) % (vocab - 3) for q in range(n_positions + 1)]  # never the mask (vocab-1) or eos (vocab-2)
    return ScriptedLM(vocab, vocab - 1, target, [plan_conf] * (n_positions + 1), [ar_conf] * (n_positions + 1))


def scripted_config(net: ScriptedLM, **overrides) -> RefusionConfig:
    base = dict(gen_length=16, slot_size=4, serial_num_blocks=1, mask_id=net.mask_id, eos_id=net.vocab - 2)
    return RefusionConfig(**{**base, **overrides})


def test_slot_threshold_one_commits_the_best_slot_each_round():
    p = 4
    net = scripted(p + 16)
    ranking = [0.5, 0.8, 0.6, 0.7]  # first-token confidence of slots 0..3
    for j, c in enumerate(ranking):
        net.plan_conf[p + 4 * j] = c
    tracker = Tracker(p, 16)
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net, slot_threshold=1.0,
                                                                                  token_threshold=0.9), tracker)
    committed_slots = [(e.positions[-4] - p) // 4 for e in tracker.events]
    assert committed_slots == [1, 3, 2, 0]
    assert all(e.n_new == 4 and e.path == "verify" for e in tracker.events)
    assert out.nfe == 2 * 4 and out.token_ids == net.target[p:p + 16]


def test_slot_threshold_one_on_a_network_picks_highest_first_token_score(model):
    prompt = make_prompt()
    cfg = config(slot_threshold=1.0, token_threshold=0.0, serial_num_blocks=1)
    tracker = Tracker(prompt.shape[1], cfg.gen_length)
    out = refusion_decode_row(model, prompt, cfg, on_commit=tracker)
    assert out.nfe == 2 * (cfg.gen_length // cfg.slot_size) and all(e.n_new == cfg.slot_size for e in tracker.events)
    p = prompt.shape[1]
    tokens, positions = prompt[0].tolist(), list(range(p))
    remaining = list(range(p, p + cfg.gen_length, cfg.slot_size))
    for event in tracker.events:
        masks = [q for s in remaining for q in range(s, s + cfg.slot_size)]
        logits, _ = full_forward(model, tokens + [MASK] * len(masks), positions + masks)
        probs = torch.softmax(logits[-len(masks):], -1).max(-1).values[:: cfg.slot_size]
        best = remaining[int(probs.argmax())]
        assert event.positions[-cfg.slot_size] == best
        remaining.remove(best)
        tokens, positions = list(event.tokens), list(event.positions)


def test_token_threshold_one_costs_two_forwards_per_slot_token(model):
    prompt = make_prompt()
    cfg = config(slot_threshold=0.0, token_threshold=1.0, slot_size=4, serial_num_blocks=2)
    out = refusion_decode_row(model, prompt, cfg)
    assert out.iterations == 2 and out.nfe == 2 * cfg.slot_size * out.iterations
    # with the scripted network: every token after the first of a slot is an MDM proposal (= target)
    net = scripted(4 + 16, ar_conf=0.99)
    out = refusion_decode_row(net, torch.tensor([net.target[:4]]), scripted_config(net, slot_threshold=0.0,
                                                                                  token_threshold=1.0))
    assert out.nfe == 2 * 4 and out.token_ids == net.target[4:20]
    # in-slot windows start at the last token every slot accepted, re-fed so its logits score the next token; the
    # four windows go together on the one cache row, which holds the prompt and each slot's accepted prefix
    assert [tuple(c.input_ids.shape) for c in net.calls[2:]] == [(1, 4 * w) for w in (4, 4, 3, 3, 2, 2)]
    assert [c.cache_len for c in net.calls[2:]] == [4 + 4 * s for s in (0, 0, 1, 1, 2, 2)]


def test_thresholds_compare_strictly():
    """Probabilities of exactly 1.0 do not pass thresholds of 1.0 (the reference compares with >)."""
    net = scripted(4 + 16, plan_conf=1.0, ar_conf=1.0)
    out = refusion_decode_row(net, torch.tensor([net.target[:4]]), scripted_config(net, slot_threshold=1.0,
                                                                                  token_threshold=1.0))
    assert out.iterations == 4 and out.nfe == 4 * 2 * 4 and out.token_ids == net.target[4:20]


# ---- 7: slot size 1 -----------------------------------------------------------------------------------------------
def test_slot_size_one_is_threshold_parallel_single_token_mdm(model):
    prompt = make_prompt()
    cfg = config(slot_size=1, gen_length=12, serial_num_blocks=1, slot_threshold=0.6, token_threshold=0.99)
    tracker = Tracker(prompt.shape[1], cfg.gen_length)
    out = refusion_decode_row(model, prompt, cfg, on_commit=tracker)
    assert all(e.path == "verify" for e in tracker.events)  # verification can never reject a 1-token slot
    tokens, positions = prompt[0].tolist(), list(range(prompt.shape[1]))
    remaining = list(range(prompt.shape[1], prompt.shape[1] + cfg.gen_length))
    rounds = 0
    while remaining:
        logits, _ = full_forward(model, tokens + [MASK] * len(remaining), positions + remaining)
        probs, best = torch.softmax(logits[-len(remaining):], -1).max(-1)
        pick = [i for i, c in enumerate(probs.tolist()) if c > cfg.slot_threshold] or [int(probs.argmax())]
        tokens += [int(best[i]) for i in pick]
        positions += [remaining[i] for i in pick]
        remaining = [q for i, q in enumerate(remaining) if i not in pick]
        rounds += 1
    assert rounds > 1 and any(e.n_new > 1 for e in tracker.events), "the test should mix single and parallel rounds"
    assert out.nfe == 2 * rounds
    assert out.token_ids == [t for _, t in sorted(zip(positions, tokens))][prompt.shape[1]:]


# ---- 8: plan unshifted, verification shifted ----------------------------------------------------------------------
def test_plan_reads_unshifted_and_verification_reads_shifted():
    p = 4
    net = scripted(p + 16)  # masks predict their own position, tokens predict the next one
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net))
    assert out.token_ids == net.target[p:p + 16]
    assert out.nfe == 2  # one plan + one verify accepted every slot: both readings must be right for this
    # one weak AR score inside slot 0 sends the round to the in-slot loop: exactly one pass completes it
    net = scripted(p + 16)
    net.ar_conf[p + 1] = 0.5
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net))
    assert out.token_ids == net.target[p:p + 16] and out.nfe == 4
    draft, verify = net.calls[2:]  # the in-slot pass: 4 windows in one row on top of the prompt, no cache copy
    assert (draft.input_ids == net.mask_id).any() and (verify.input_ids != net.mask_id).all()
    assert verify.input_ids.shape == (1, 16) and verify.cache_len == p


# ---- EOS: fixed defects 1.6a and 1.6h -----------------------------------------------------------------------------
def test_eos_in_parallel_path_keeps_earlier_unchosen_slots():
    """1.6a: the EOS row (row 0 = slot 2) must drop slots >= 2, not slots >= 0."""
    p = 4
    net = scripted(p + 16)
    eos = net.vocab - 2
    net.target[p + 10] = eos  # slot 2, third token
    for j, c in enumerate([0.5, 0.5, 0.95, 0.95]):
        net.plan_conf[p + 4 * j] = c
    net.ar_conf[p + 9] = 0.5  # slot 2's second token fails global verification -> in-slot path
    tracker = Tracker(p, 16)
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net), tracker)
    assert tracker.events[0].path == "parallel" and tracker.events[0].n_new == 3  # slot 2 up to its EOS
    assert out.token_ids == net.target[p:p + 11] and not out.hit_max_tokens
    assert out.nfe == 4 + 2 + 2  # then slots 0 and 1, one round each
    assert sorted(tracker.events[-1].positions[p:]) == list(range(p, p + 11))


@pytest.mark.parametrize("eos_slot, expected_nfe", [(0, 4), (1, 8)])
def test_eos_in_parallel_path_drops_later_rows(eos_slot, expected_nfe):
    """Rows after the EOS row stop being completed (and leave the cache); rows before it are finished."""
    p = 4
    net = scripted(p + 16)
    eos_pos = p + 4 * eos_slot + 2 - eos_slot  # slot 0: third token; slot 1: second token
    net.target[eos_pos] = net.vocab - 2
    for q in (p + 1, p + 2, p + 3) if eos_slot else (p + 1,):
        net.ar_conf[q] = 0.5  # slot 0 goes to the in-slot loop (and needs 3 passes when the EOS is in slot 1)
    for q in range(p + 9, p + 16):
        if q % 4:
            net.ar_conf[q] = 0.5  # slots 2 and 3 would need more passes if they were kept
    tracker = Tracker(p, 16)
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net), tracker)
    assert out.token_ids == net.target[p:eos_pos + 1] and out.nfe == expected_nfe
    assert len(tracker.events) == 1 and tracker.events[0].path == "parallel"


def test_output_is_cut_at_first_eos_in_position_order():
    """1.6h: slot 3 is committed before the EOS appears in slot 1; its text must not reach the output."""
    p = 4
    net = scripted(p + 16)
    eos = net.vocab - 2
    net.target[p + 5] = eos
    for j, c in enumerate([0.5, 0.5, 0.5, 0.95]):
        net.plan_conf[p + 4 * j] = c
    tracker = Tracker(p, 16)
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net), tracker)
    assert [e.positions[len(e.tokens) - e.n_new] for e in tracker.events] == [p + 12, p, p + 4]
    assert out.committed_tokens == 10
    assert out.token_ids == net.target[p:p + 6] and out.token_ids[-1] == eos
    assert not out.hit_max_tokens and out.nfe == 6


def test_eos_stops_later_serial_blocks():
    p = 4
    net = scripted(p + 16)
    net.target[p + 2] = net.vocab - 2
    tracker = Tracker(p, 16)
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net, serial_num_blocks=2), tracker)
    assert out.token_ids == net.target[p:p + 3] and out.nfe == 2
    assert max(tracker.events[-1].positions) < p + 8  # block 2 never generated


# ---- 9: temperature -----------------------------------------------------------------------------------------------
def test_seeded_sampling_is_reproducible(model):
    prompt = make_prompt()
    cfg = config(temperature=1.0, slot_threshold=0.5, token_threshold=0.05, seed=11)
    a, b = refusion_decode_row(model, prompt, cfg), refusion_decode_row(model, prompt, cfg)
    assert a == b
    others = [refusion_decode_row(model, prompt, config(temperature=1.0, slot_threshold=0.5, token_threshold=0.05,
                                                      seed=s)).token_ids for s in (12, 13, 14)]
    assert any(o != a.token_ids for o in others)


def test_temperature_changes_only_plan_proposals():
    p = 4
    # near one-hot plan distributions: sampling cannot change a proposal, so nothing changes at all
    net = scripted(p + 16, plan_conf=1.0)
    greedy = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net))
    hot = refusion_decode_row(net, torch.tensor([net.target[:p]]), scripted_config(net, temperature=2.0, seed=0))
    assert hot == greedy
    # flat plan distributions: the sampled plan proposals become slot heads; in-slot drafts stay greedy (= target)
    net = scripted(p + 16, plan_conf=0.5)
    cfg = scripted_config(net, temperature=2.0, seed=3, slot_threshold=0.0, token_threshold=1.0, eos_id=NO_EOS)
    out = refusion_decode_row(net, torch.tensor([net.target[:p]]), cfg)
    heads = [i for i in range(16) if i % 4 == 0]
    assert [out.token_ids[i] for i in range(16) if i not in heads] == [net.target[p + i] for i in range(16) if i not in heads]
    assert any(out.token_ids[i] != net.target[p + i] for i in heads), "sampling never moved a plan proposal"
    assert out.nfe == 2 * 4


def test_slot_scores_come_from_the_unnoised_softmax():
    p = 4
    net = scripted(p + 32, plan_conf=0.7)
    cfg = scripted_config(net, gen_length=32, temperature=1.0, seed=5, slot_threshold=0.65, token_threshold=0.9,
                          eos_id=NO_EOS)
    refusion_decode_row(net, torch.tensor([net.target[:p]]), cfg)
    plan_idx = [i for i, c in enumerate(net.calls) if c.input_ids.shape[0] == 1 and (c.input_ids[0, -4:] == net.mask_id).all()]
    checked = 0
    for i in plan_idx:
        chosen = net.calls[i + 1]  # the global verification feeds the chosen drafts
        heads = chosen.input_ids[0, ::4].tolist()
        head_pos = chosen.position_ids[0, ::4].tolist()
        right = [t == net.target[q] for t, q in zip(heads, head_pos)]
        # a head is chosen for its un-noised probability (0.7 if right, ~0.01 if not), or alone as the fallback
        assert all(right) or len(heads) == 1
        checked += len(heads) > 1
    assert checked > 0


def test_to_decode_result(model):
    out = refusion_decode_row(model, make_prompt(), config(slot_threshold=0.0, token_threshold=0.0))
    result = out.to_decode_result()
    assert result.token_ids == out.token_ids and result.nfe == float(out.nfe) and result.hit_max_tokens
    assert math.isfinite(out.tokens_per_forward)


def test_contract_decodes_each_left_padded_row_alone_and_needs_token_ids(model):
    cfg = config(slot_threshold=0.5, token_threshold=0.5)
    short, long = make_prompt(3, seed=5), make_prompt(7, seed=6)
    ids = torch.cat([torch.cat([torch.zeros(1, 4, dtype=torch.long), short], 1), long])
    mask = torch.tensor([[0] * 4 + [1] * 3, [1] * 7])
    out = refusion_generate(model, ids, mask, cfg)
    alone = [refusion_decode_row(model, p, cfg) for p in (short, long)]
    assert [r.token_ids for r in out.rows] == [a.token_ids for a in alone]
    assert [r.nfe for r in out.rows] == [float(a.nfe) for a in alone] and out.nfe == sum(a.nfe for a in alone)
    assert [t.iterations for t in out.trace] == [a.iterations for a in alone]
    with pytest.raises(ConfigError, match="mask_id is not set") as info:
        refusion_generate(model, long, None, config(mask_id=None))
    assert "\n" not in str(info.value)
