"""Fast-dLLM (v1) invariants (docs/decoders.md §4) on the native tiny LLaDA and Dream networks (fp32, CPU) and on
scripted networks with known confidences."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
import torch

from diffusion_stubs import ScriptedNet, one_hot_table, per_position_logits
from benchmarks.common.fastdllm_modes import MODES, mode_config
from models.decoders.contract import ConfigError, DecodeResult
from models.decoders.dream import DreamConfig, dream_generate
from models.decoders.fastdllm.core import Padding, full_forward, window_forward
from models.decoders.fastdllm.dream_sampler import FastDreamConfig, fastdllm_dream_generate, validate_fast_dream_config
from models.decoders.fastdllm.llada_sampler import FastLLaDAConfig, fastdllm_llada_generate, validate_fast_llada_config
from models.decoders.llada import LLaDAConfig, llada_generate
from models.networks.dream import tiny_dream_config
from models.networks.llada import tiny_llada_config
from models.networks.loading import build_network
from models.options import option, replace_leaves

V, MASK, EOS, EOT = 64, 63, 1, 2
PROMPT = torch.tensor([[5, 17, 33, 8, 21, 40]])
LLADA = replace_leaves(FastLLaDAConfig(), gen_length=16, steps=16, block_length=8, threshold=0.7, cache="none",
                       mask_id=MASK, eos_id=EOS, eot_id=EOT)
DREAM = replace_leaves(FastDreamConfig(), max_new_tokens=16, steps=4, block_length=8, threshold=0.7, cache="none",
                       mask_id=MASK, eos_ids=(EOS,))


def network(kind: str, sharpen: float = 1.0):
    """A tiny fp32 network; ``sharpen`` scales the LM head so some confidences clear a 0.7 threshold."""
    config = tiny_llada_config(V) if kind == "llada" else tiny_dream_config(V)
    net = build_network(config, seed=0)
    head = net.model.transformer.ff_out if kind == "llada" else net.lm_head
    head.weight.mul_(sharpen)
    return net


class NoMaskProposals(torch.nn.Module):
    """The network with the mask id's logit pushed down. A random tiny network sometimes proposes the mask id
    itself, which a trained checkpoint does not; the reference loops then lose count of the masks."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, ids, **kwargs):
        logits = self.net(ids, **kwargs).clone()
        logits[..., MASK] = -1e4
        return logits

    def new_cache(self, batch: int, capacity: int):
        return self.net.new_cache(batch, capacity)


@pytest.fixture(scope="module")
def nets() -> dict[tuple[str, float], torch.nn.Module]:
    return {(k, s): NoMaskProposals(network(k, s)) for k in ("llada", "dream") for s in (1.0, 8.0)}


def generate(kind: str, net, ids, mask, **changes):
    if kind == "llada":
        return fastdllm_llada_generate(net, ids, mask, replace_leaves(LLADA, **changes))
    return fastdllm_dream_generate(net, ids, mask, replace_leaves(DREAM, **changes))


# ---- a recording wrapper ------------------------------------------------------------------------------------------
@dataclass
class Call:
    ids: torch.Tensor
    kind: str  # "full" | "prefix" | "dual"
    offset: int  # canvas column of ids[:, 0]
    logits: torch.Tensor
    position_ids: torch.Tensor | None


@dataclass
class Recorder:
    """Forwards to the network and records what each call was given and returned. A call is a window of the cache
    ``mode`` when its reservation starts past column 0, else the full forward."""

    network: torch.nn.Module
    mode: str
    calls: list[Call] = field(default_factory=list)

    def __call__(self, ids, attention_mask=None, position_ids=None, cache=None, reservation=None):
        offset = 0 if reservation is None else reservation.uniform
        kind = self.mode if offset else "full"
        logits = self.network(ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                              reservation=reservation)
        self.calls.append(Call(ids.clone(), kind, offset, logits.clone(), position_ids))
        return logits

    def new_cache(self, batch: int, capacity: int):
        return self.network.new_cache(batch, capacity)


def canvases(calls: list[Call], final: torch.Tensor) -> list[torch.Tensor]:
    """The canvas before each call, then the final one: a window call overwrites its columns of the last canvas
    (steps only change the current block, which every window contains)."""
    states, canvas = [], None
    for c in calls:
        if c.kind == "full":
            canvas = c.ids.clone()
        else:
            canvas = canvas.clone()
            canvas[:, c.offset : c.offset + c.ids.shape[1]] = c.ids
        states.append(canvas)
    return states + [final]


def commits_per_call(calls: list[Call], final: torch.Tensor) -> list[int]:
    states = canvases(calls, final)
    return [int(((a == MASK) & (b != MASK)).sum()) for a, b in zip(states[:-1], states[1:])]


def run_recorded(kind: str, net, **changes):
    rec = Recorder(net, changes.get("cache", "none"))
    out = generate(kind, rec, PROMPT, None, **changes)
    final = torch.cat([PROMPT, out.tokens], dim=1)
    return rec, out, final


MODES_ALL = [(k, c) for k in ("llada", "dream") for c in ("none", "prefix", "dual")]


# ---- configuration ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes,message",
    [
        ({"cache": "triple"}, "unknown cache 'triple'"),
        ({"threshold": -0.1}, "threshold must be >= 0"),
        ({"gen_length": 12}, "multiple of block_length"),
        ({"steps": 3}, "multiple of the number of blocks"),
        ({"remasking": "top"}, "unknown remasking"),
    ],
)
def test_bad_llada_configs_raise_one_line_errors(changes, message):
    with pytest.raises(ConfigError, match=message) as info:
        validate_fast_llada_config(replace_leaves(LLADA, **changes))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"cache": "dual", "threshold": None, "alg": "maskgit_plus", "steps": 16}, "entropy only"),
        ({"cache": "prefix", "threshold": None, "steps": 2}, "needs >= 2"),
        ({"cache": "none", "steps": 5}, "multiple of steps"),
        ({"cache": "dual", "max_new_tokens": 12}, "multiple of block_length"),
        ({"alg": "confidence_threshold"}, "unknown alg"),
    ],
)
def test_bad_dream_configs_raise_one_line_errors(changes, message):
    with pytest.raises(ConfigError, match=message) as info:
        validate_fast_dream_config(replace_leaves(DREAM, **changes))
    assert "\n" not in str(info.value)


def test_paper_modes_follow_the_evaluation_table():
    """docs/decoders.md §4: steps = gen without a threshold, gen / 32 with one; block 32 everywhere."""
    table = {"baseline": ("none", None, 256), "prefix": ("prefix", None, 256), "dual": ("dual", None, 256),
             "parallel": ("none", 0.9, 8), "prefix+parallel": ("prefix", 0.9, 8), "dual+parallel": ("dual", 0.9, 8)}
    assert set(MODES) == set(table)
    for mode, expected in table.items():
        llada, dream = mode_config("llada", mode, 256), mode_config("dream", mode, 256, seed=3)
        validate_fast_llada_config(llada)
        validate_fast_dream_config(dream)
        for cfg in (llada, dream):
            assert tuple(option(cfg, k) for k in ("cache", "threshold", "steps", "block_length")) == (*expected, 32)
        assert dream.dream.alg == "entropy" and dream.dream.seed == 3
    with pytest.raises(ConfigError, match="unknown Fast-dLLM mode"):
        mode_config("llada", "turbo", 256)


# ---- threshold decoding -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,cache", MODES_ALL)
def test_threshold_commits_at_least_one_token_per_forward_and_nfe_counts_calls(nets, kind, cache):
    rec, out, final = run_recorded(kind, nets[kind, 8.0], cache=cache)
    per_call = commits_per_call(rec.calls, final)
    assert out.nfe == len(rec.calls)
    assert min(per_call) >= 1 and sum(per_call) == 16 and (out.tokens != MASK).all()
    assert max(per_call) > 1  # the threshold did decode in parallel somewhere
    blocks = 1 if (kind, cache) == ("dream", "none") else 2
    assert out.nfe <= 16 + (blocks if cache != "none" else 0)


@pytest.mark.parametrize("kind,cache", MODES_ALL)
def test_threshold_above_one_commits_exactly_one_token_per_forward(nets, kind, cache):
    rec, out, final = run_recorded(kind, nets[kind, 8.0], cache=cache, threshold=1.5)
    assert commits_per_call(rec.calls, final) == [1] * 16
    assert out.nfe == 16


@pytest.mark.parametrize("kind,cache", MODES_ALL)
def test_nfe_counts_calls_with_the_step_schedule(nets, kind, cache):
    steps = 16 if not (kind == "dream" and cache == "none") else 8
    rec, out, final = run_recorded(kind, nets[kind, 1.0], cache=cache, threshold=None, steps=steps)
    assert out.nfe == len(rec.calls) and (out.tokens != MASK).all()


def test_llada_threshold_takes_top1_and_every_mask_at_or_above_it():
    """Scripted confidences: block masks at 0.95, 0.5, t, 0.2 with t exactly the threshold (>= passes); then the
    next step takes only the top-1 of what is left, although it is below the threshold."""
    probs = [0.95, 0.5, 0.9, 0.2]
    rows = []
    for p in probs:
        row = torch.full((V,), math.log((1 - p) / (V - 1)), dtype=torch.float64)
        row[10] = math.log(p)
        rows.append(row)
    table = torch.stack([torch.zeros(V, dtype=torch.float64)] * 2 + rows).float()
    threshold = float(torch.softmax(table[4].double(), -1)[10])  # the float64 confidence of the 0.9 position
    net = ScriptedNet(per_position_logits(table))
    cfg = replace_leaves(LLADA, gen_length=4, steps=4, block_length=4, threshold=threshold)
    out = fastdllm_llada_generate(net, torch.tensor([[3, 4]]), None, cfg)
    masks = [(c.x[0, 2:] == MASK).tolist() for c in net.calls]
    assert masks == [[True] * 4, [False, True, False, True], [False, False, False, True]]
    assert out.nfe == 3 and out.tokens.tolist() == [[10] * 4]


# ---- equivalences -------------------------------------------------------------------------------------------------
def test_no_threshold_no_cache_equals_plain_llada(nets):
    """threshold None, steps = gen_length, no cache: LLaDA's own sampler (fp32 tiny model, so no ties in practice)."""
    net = nets["llada", 1.0]
    ids = torch.tensor([[0, 0, 5, 17, 33], [9, 12, 44, 3, 7]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    fast = fastdllm_llada_generate(net, ids, mask, replace_leaves(LLADA, threshold=None))
    plain = llada_generate(net, ids, mask, LLaDAConfig(gen_length=16, steps=16, block_length=8, mask_id=MASK,
                                                       eos_id=EOS, eot_id=EOT))
    assert torch.equal(fast.tokens, plain.tokens) and fast.nfe == plain.nfe == 16


def test_dream_without_cache_or_threshold_is_plain_dream(nets):
    net = nets["dream", 1.0]
    fast = generate("dream", net, PROMPT, None, threshold=None, steps=16, alg="topk_margin")
    plain = dream_generate(net, PROMPT, None, DreamConfig(max_new_tokens=16, steps=16, alg="topk_margin",
                                                          mask_id=MASK, eos_ids=(EOS,)))
    assert torch.equal(fast.tokens, plain.tokens) and fast.nfe == plain.nfe


def _reference_dream_threshold(net, ids: torch.Tensor, gen: int, steps: int, threshold: float) -> tuple[torch.Tensor, int]:
    """Fast-dLLM ``generation_utils._sample`` with ``alg='confidence_threshold'`` at T = 0, batch 1, transcribed
    loop for loop: a carry of rejected candidates and, at the last step, one extra step per rejection."""
    x = torch.cat([ids, torch.full((1, gen), MASK)], dim=1)
    n = gen // steps
    carry, i, forwards, useful = 0, 0, 0, 0
    while i < steps:
        mask_index = x == MASK
        logits = net(x)
        forwards += 1
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        confidence, x0 = torch.softmax(logits[mask_index], dim=-1).max(dim=-1)
        proposal = torch.full_like(x, MASK)
        proposal[mask_index] = x0
        full = torch.full(x.shape, float("-inf"))
        full[mask_index] = confidence
        k = n + carry
        carry = 0
        values, index = torch.topk(full, k)
        transfer = torch.zeros_like(x, dtype=torch.bool)
        if k > 0:
            transfer[0, index[0, 0]] = True
        for j in range(1, k):
            if values[0, j] < threshold:
                if i < steps - 1:
                    carry += 1
                else:
                    n, steps, carry = 0, steps + 1, carry + 1
            else:
                transfer[0, index[0, j]] = True
        useful += int((transfer & mask_index).any())
        x[transfer] = proposal[transfer]
        i += 1
    return x[:, ids.shape[1]:], useful


@pytest.mark.parametrize("steps,threshold", [(4, 0.7), (2, 0.75), (8, 0.5)])
def test_dream_no_cache_threshold_matches_the_reference_carry_loop(nets, steps, threshold):
    net = nets["dream", 8.0]
    expected, useful = _reference_dream_threshold(net, PROMPT, 16, steps, threshold)
    out = generate("dream", net, PROMPT, None, steps=steps, threshold=threshold)
    assert torch.equal(out.tokens, expected)
    assert out.nfe == useful  # the reference also spends forwards that commit nothing; these are skipped


# ---- caches -------------------------------------------------------------------------------------------------------
def test_prefix_cache_first_step_identical_later_steps_close_but_not_equal(nets):
    """Same full forward at the block start; the next step sees a prefix K/V computed before the first commit."""
    net = nets["llada", 1.0]
    plain_rec, _, _ = run_recorded("llada", net, threshold=None, cache="none")
    prefix_rec, _, _ = run_recorded("llada", net, threshold=None, cache="prefix")
    assert torch.equal(plain_rec.calls[0].logits, prefix_rec.calls[0].logits)
    start = PROMPT.shape[1]
    second_plain, second_prefix = plain_rec.calls[1], prefix_rec.calls[1]
    assert second_prefix.kind == "prefix" and second_prefix.offset == start
    assert torch.equal(second_plain.ids[:, start:], second_prefix.ids)  # same canvas, so only the cache differs
    fresh, stale = second_plain.logits[:, start:], second_prefix.logits
    gap = (fresh - stale).abs().max()
    assert 1e-3 < gap < 0.05 * fresh.abs().max()  # a real (not rounding) difference, yet small


@pytest.mark.parametrize("kind", ["llada", "dream"])
@pytest.mark.parametrize("mode", ["prefix", "dual"])
@pytest.mark.parametrize("padded", [False, True])
def test_window_queries_sit_at_absolute_positions(nets, kind, mode, padded):
    """With a cache that is not stale (nothing changed since the full forward) a window call must give the full
    forward's logits at its columns; queries at any other positions would not."""
    net = nets[kind, 1.0]
    ids = torch.tensor([[0, 0, 0, 5, 17, 33], [9, 12, 44, 3, 7, 30]])
    x = torch.cat([ids, torch.full((2, 16), MASK)], dim=1)
    x[:, 6:8] = torch.tensor([11, 12])
    mask = torch.ones_like(x)
    if padded:
        mask[0, :3] = 0
    positions = None
    if padded and kind == "dream":
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    padding = Padding(mask=mask if padded else None, positions=positions)
    start, end = 14, 22
    cache = net.new_cache(2, x.shape[1])
    full = full_forward(net, x, padding, cache)
    if mode == "prefix":
        cache.truncate_all(start)
    window, offset = window_forward(net, x, start, end, mode, padding, cache)
    stop = None if mode == "prefix" else end
    assert offset == start
    torch.testing.assert_close(window, full[:, start:stop], atol=1e-5, rtol=1e-5)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def _rope(t: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    d = t.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.double()[:, None] * inv
    ang = torch.cat([ang, ang], dim=-1)
    rotated = torch.cat([-t[..., d // 2 :], t[..., : d // 2]], dim=-1)
    return t * ang.cos() + rotated * ang.sin()


def _layers(net, kind: str):
    """Per layer: norms, projections and the MLP of either network, named uniformly."""
    if kind == "llada":
        c, t = net.config, net.model.transformer
        for b in t.blocks:
            yield dict(n1=b.attn_norm.weight, q=b.q_proj, k=b.k_proj, v=b.v_proj, o=b.attn_out, n2=b.ff_norm.weight,
                       gate=b.ff_proj, up=b.up_proj, down=b.ff_out, heads=c.n_heads, kv=c.kv_heads, eps=c.rms_norm_eps,
                       theta=c.rope_theta)
    else:
        c = net.config
        for layer in net.model.layers:
            a, m = layer.self_attn, layer.mlp
            yield dict(n1=layer.input_layernorm.weight, q=a.q_proj, k=a.k_proj, v=a.v_proj, o=a.o_proj,
                       n2=layer.post_attention_layernorm.weight, gate=m.gate_proj, up=m.up_proj, down=m.down_proj,
                       heads=c.num_attention_heads, kv=c.kv_heads, eps=c.rms_norm_eps, theta=c.rope_theta)


def _linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    out = x @ layer.weight.double().T
    return out if layer.bias is None else out + layer.bias.double()


def _block_kv_against(net, kind: str, block_ids: torch.Tensor, start: int, stale: list[tuple[torch.Tensor, ...]]):
    """Float64 re-derivation of the block's per-layer K/V (post-RoPE) when it attends to ``stale`` K/V everywhere
    outside [start, end): the dual cache's contract."""
    end = start + block_ids.shape[1]
    embed = net.model.transformer.wte if kind == "llada" else net.model.embed_tokens
    h = embed.weight.double()[block_ids]
    positions = torch.arange(start, end)
    out = []
    for i, p in enumerate(_layers(net, kind)):
        a = _rms(h, p["n1"], p["eps"])
        b, length, _ = a.shape

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.view(b, length, n, -1).transpose(1, 2)

        q = _rope(heads(_linear(p["q"], a), p["heads"]), positions, p["theta"])
        k = _rope(heads(_linear(p["k"], a), p["kv"]), positions, p["theta"])
        v = heads(_linear(p["v"], a), p["kv"])
        out.append((k, v))
        keys = torch.cat([stale[i][0][:, :, :start].double(), k, stale[i][0][:, :, end:].double()], dim=2)
        values = torch.cat([stale[i][1][:, :, :start].double(), v, stale[i][1][:, :, end:].double()], dim=2)
        rep = p["heads"] // p["kv"]
        keys, values = keys.repeat_interleave(rep, dim=1), values.repeat_interleave(rep, dim=1)
        attn = torch.softmax(q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ values
        h = h + _linear(p["o"], attn.transpose(1, 2).reshape(b, length, -1))
        m = _rms(h, p["n2"], p["eps"])
        h = h + _linear(p["down"], torch.nn.functional.silu(_linear(p["gate"], m)) * _linear(p["up"], m))
    return out


@pytest.mark.parametrize("kind", ["llada", "dream"])
def test_dual_cache_slice_equals_block_kv_computed_against_the_stale_suffix(nets, kind):
    net = nets[kind, 1.0].net
    x = torch.cat([PROMPT, torch.full((1, 24), MASK)], dim=1)
    start, end = 14, 22
    cache = net.new_cache(1, x.shape[1])
    full_forward(net, x, Padding(), cache)
    stale = cache.row_kv(0)
    x[:, start : start + 3] = torch.tensor([11, 12, 13])  # the block moved on; the suffix K/V did not
    x[:, start + 5] = 30
    window_forward(net, x, start, end, "dual", Padding(), cache)
    expected = _block_kv_against(net, kind, x[:, start:end], start, stale)
    for i, (k, v) in enumerate(expected):
        torch.testing.assert_close(cache.keys[i][:, :, start:end].double(), k, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(cache.values[i][:, :, start:end].double(), v, atol=2e-5, rtol=1e-4)
        for got, old in zip(cache.kv[i], stale[i]):
            assert torch.equal(got[:, :, :start], old[:, :, :start]) and torch.equal(got[:, :, end:], old[:, :, end:])
        assert not torch.allclose(cache.keys[i][:, :, start:end], stale[i][0][:, :, start:end])


@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("threshold", [0.7, None])
def test_dream_cache_commits_each_block_start_from_the_full_forward(nets, cache, threshold):
    steps = 16 if threshold is None else 4
    rec, out, final = run_recorded("dream", nets["dream", 8.0], cache=cache, threshold=threshold, steps=steps)
    states = canvases(rec.calls, final)
    full_calls = [i for i, c in enumerate(rec.calls) if c.kind == "full"]
    assert len(full_calls) == 2
    for i in full_calls:
        before, after = states[i], states[i + 1]
        start = int((before[0] == MASK).nonzero()[0])
        committed = ((before == MASK) & (after != MASK)).nonzero()[:, 1].tolist()
        assert committed == [start]
        assert int(after[0, start]) == int(rec.calls[i].logits[0, start - 1].argmax())  # shifted: output at start-1
    windows = [c for c in rec.calls if c.kind != "full"]
    width = 8 if cache == "dual" else None  # a dual window is the block; a prefix one runs to the canvas's end
    assert windows and all(c.ids.shape[1] == (width or final.shape[1] - c.offset) for c in windows)
    assert all(bool((c.ids[:, 0] != MASK).all()) for c in windows)


def test_dream_cached_entropy_schedule_counts_the_forced_token_as_step_one(nets):
    """Block 8, 4 steps per block: forced 1, then floor(7 (1 - s/t)) = 2, floor(5 (1 - s/t)) = 2, rest = 3 on the
    grid linspace(1, 1e-3, 5)."""
    rec, out, final = run_recorded("dream", nets["dream", 1.0], cache="dual", threshold=None, steps=8)
    assert commits_per_call(rec.calls, final) == [1, 2, 2, 3] * 2 and out.nfe == 8


@pytest.mark.parametrize("kind,cache", [("llada", "dual"), ("llada", "prefix"), ("dream", "prefix"), ("dream", "dual")])
def test_left_padded_batch_equals_single_runs(nets, kind, cache):
    net = nets[kind, 8.0]
    long, short = torch.tensor([[9, 12, 44, 3, 7, 30]]), torch.tensor([[5, 17, 33]])
    ids = torch.cat([long, torch.cat([torch.zeros(1, 3, dtype=torch.long), short], dim=1)])
    mask = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1]])
    batched = generate(kind, net, ids, mask, cache=cache)
    for row, prompt in enumerate((long, short)):
        single = generate(kind, net, prompt, None, cache=cache)
        assert torch.equal(batched.tokens[row], single.tokens[0])


def test_rows_cut_after_eos_or_eot_and_split_nfe():
    # confidence falls with the position, so the commits go left to right (equal one-hot rows do not tie exactly:
    # the float64 softmax's sum depends on where the maximum sits in the vector)
    table = one_hot_table([0, 0, 5, 6, 7, EOT, 8, EOS, 9, 10], V) * torch.linspace(1.5, 1.0, 10)[:, None]
    cfg = replace_leaves(LLADA, gen_length=8, steps=8, block_length=8, threshold=None)
    out = fastdllm_llada_generate(ScriptedNet(per_position_logits(table)), torch.tensor([[3, 4], [3, 4]]), None, cfg)
    assert out.tokens[0].tolist() == [5, 6, 7, EOT, 8, EOS, 9, 10] and out.nfe == 8
    assert list(out.rows) == [DecodeResult([5, 6, 7, EOT], 4.0, False, forwards=8, commit_step=(1, 2, 3, 4))] * 2


def test_threshold_selection_takes_each_rows_first_maximum_and_every_candidate_at_or_above():
    from models.decoders.fastdllm.core import select_transfer

    generator = torch.Generator().manual_seed(0)
    confidence = torch.randint(0, 4, (64, 12), generator=generator).float() / 4  # many ties
    candidates = torch.rand((64, 12), generator=generator) < 0.6
    chosen = select_transfer(confidence, candidates, None, 0.7)
    for row in range(64):
        indices = [i for i in range(12) if candidates[row, i]]
        want = set()
        if indices:
            best = max(float(confidence[row, i]) for i in indices)
            want = {next(i for i in indices if float(confidence[row, i]) == best)}
            want |= {i for i in indices if float(confidence[row, i]) >= 0.7}
        assert set(chosen[row].nonzero().flatten().tolist()) == want


# ---- per-row seeds in a static batch ------------------------------------------------------------------------------
SAMPLED = {"llada-gumbel": ("llada", 2.0, 0.5, {"temperature": 0.8}),
           "llada-random": ("llada", 2.0, 0.5, {"temperature": 1.0, "remasking": "random"}),
           "dream": ("dream", 8.0, 0.3, {"temperature": 0.8})}


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("name", list(SAMPLED))
def test_sampled_static_batch_with_row_seeds_equals_each_row_alone(nets, name, cache):
    """A threshold on a sharpened network closes the rows' blocks at different steps; the batch keeps stepping a
    block until its last row is done, and a row whose block is full draws nothing meanwhile, so each row's tokens
    are its own alone (with its seed)."""
    kind, sharpen, threshold, sampling = SAMPLED[name]
    net = nets[kind, sharpen] if (kind, sharpen) in nets else NoMaskProposals(network(kind, sharpen))
    prompts, seeds = [[5, 17, 33, 8, 21, 40], [9, 12, 44], [3, 7, 30, 11]], (101, 202, 303)
    ids = torch.tensor([[0] * (6 - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (6 - len(p)) + [1] * len(p) for p in prompts])
    decode = fastdllm_llada_generate if kind == "llada" else fastdllm_dream_generate
    config = replace_leaves(LLADA if kind == "llada" else DREAM, cache=cache, threshold=threshold, **sampling)
    together = decode(net, ids, mask, config, row_seeds=seeds)
    alone = [decode(net, torch.tensor([p]), None, config, row_seeds=(s,)) for p, s in zip(prompts, seeds)]
    assert len({out.nfe for out in alone}) > 1  # the rows do take different steps
    for row, out in enumerate(alone):
        assert together.rows[row].token_ids == out.rows[0].token_ids, row
        assert together.rows[row].commit_step == out.rows[0].commit_step, row
