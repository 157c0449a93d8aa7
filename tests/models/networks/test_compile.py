"""The native networks' decode steps compiled (``CompiledNetwork``: torch.compile with fullgraph=True, so a graph
break fails the call) at batch 2 with rows of different lengths: every call a decoder makes each step compiles,
the steps of one shape share one graph (no recompile as the cache fills), and the logits and the cache equal eager's.

Each runs on dynamo's graphs op by op (seconds) and, marked slow, on inductor's kernels."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import models.networks.compiled as compiled
from models.networks.compiled import CompiledNetwork
from models.networks.dream import tiny_dream_config, tiny_fastdllm_v2_config
from models.networks.grouped_attention import GroupedWindows
from models.networks.llada import tiny_llada_config
from models.networks.llada2 import mix_experts, mix_experts_dense, tiny_llada2_config
from models.networks.loading import build_network
from models.networks.qwen3 import Qwen3NetworkConfig

torch.set_num_threads(2)

VOCAB = 300
BLOCK = 4
TOL = 1e-5
NETWORKS = {
    "llada": lambda: tiny_llada_config(VOCAB),
    "dream": lambda: tiny_dream_config(VOCAB),
    "qwen3": lambda: Qwen3NetworkConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16),
    "fastdllm-v2": lambda: tiny_fastdllm_v2_config(VOCAB),
    "llada2": lambda: tiny_llada2_config(VOCAB),
}


@pytest.fixture(params=["eager", pytest.param("inductor", marks=pytest.mark.slow)])
def graphs(request, monkeypatch):
    """Counts the graphs compiled by the backend (dynamo's caches start empty: networks share their methods' code).
    ``eager`` runs dynamo's graphs op by op, in seconds; ``inductor`` is the real backend (C++ kernels on the CPU,
    ~15 s of compile a graph)."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(request.param)
    monkeypatch.setattr(compiled, "BACKEND", counter)
    yield counter
    torch._dynamo.reset()


def network(kind: str):
    return build_network(NETWORKS[kind](), seed=1)


def tokens(rows: int, n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB - 1, (rows, n), generator=torch.Generator().manual_seed(seed))


def assert_close(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape and (a - b).abs().max() < TOL


def assert_same_caches(eager, compiled_cache) -> None:
    assert eager.lengths == compiled_cache.lengths
    for row in range(eager.batch):
        for (k0, v0), (k1, v1) in zip(eager.row_kv(row), compiled_cache.row_kv(row)):
            assert_close(k0, k1)
            assert_close(v0, v1)


def padding(kind: str, width: int) -> dict[str, torch.Tensor]:
    """Row 0 left-padded by 3; Dream also gets its tok_idx positions, as its decoders pass them."""
    mask = torch.ones(2, width, dtype=torch.long)
    mask[0, :3] = 0
    if kind == "llada":
        return {"attention_mask": mask}
    return {"attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).masked_fill(mask == 0, 1)}


def window(kwargs: dict[str, torch.Tensor], start: int, end: int | None = None) -> dict[str, torch.Tensor]:
    """Fast-dLLM's kwargs for queries x[:, start:end]: the mask over every key, the positions of the queries."""
    return {name: value[:, start:end] if name == "position_ids" else value for name, value in kwargs.items()}


@pytest.mark.parametrize("kind", ["llada", "dream"])
@torch.no_grad()
def test_full_canvas_steps_share_a_graph(kind, graphs):
    """LLaDA's and Dream's decoders (no cache): the whole padded canvas each step. (LLaDA's first call also builds its
    RoPE table, so its second is a graph of its own.)"""
    net = network(kind)
    fast = CompiledNetwork(net)
    kwargs = padding(kind, 16)
    counts = []
    for step in range(4):
        x = tokens(2, 16, step)
        assert_close(fast(x, **kwargs), net(x, **kwargs))
        counts.append(graphs.frame_count)
    assert counts[-1] == counts[-2] == counts[-3] <= 2


@pytest.mark.parametrize("kind", ["llada", "dream"])
@torch.no_grad()
def test_the_head_at_the_cells_read_compiles(kind, graphs):
    """A compiled network says it reads cells when its network does, so rows in flight ask it for the head at the
    cells a step reads (``forward(read=)``), and the compiled call gives eager's logits there."""
    net = network(kind)
    fast = CompiledNetwork(net)
    assert fast.reads_cells and net.reads_cells
    kwargs = padding(kind, 16)
    x, cells = tokens(2, 16, 1), torch.tensor([3, 17, 30, 31])
    assert_close(fast(x, read=cells, **kwargs), net(x, read=cells, **kwargs))


@torch.no_grad()
def test_llada_at_explicit_positions_with_no_pad_compiles(graphs):
    """The forms eager reads a value back for: LLaDA's RoPE at explicit positions (its table is sized by their
    maximum) and a mask with every key real (eager drops it)."""
    net = network("llada")
    fast = CompiledNetwork(net)
    kwargs = {"attention_mask": torch.ones(2, 12, dtype=torch.long), "position_ids": torch.arange(5, 17)[None]}
    x = tokens(2, 12, 0)
    assert_close(fast(x, **kwargs), net(x, **kwargs))


@pytest.mark.parametrize("kind", ["llada", "dream"])
@torch.no_grad()
def test_fastdllm_prefix_and_dual_cache_steps_compile(kind, graphs):
    """Fast-dLLM on a padded canvas of 2 blocks after the prompt: per block a full forward that stores the cache, then steps against
    its prefix (x[:, start:], ``claim(n, keep=0)``) and over the block in place (``overwrite``); a block's second
    step compiles nothing."""
    net = network(kind)
    fast = CompiledNetwork(net)
    width, size = 12, 4
    kwargs = padding(kind, width)
    x = tokens(2, width, 0)

    def filled(model):
        """The full forward's logits and the cache it filled."""
        cache = model.new_cache(2, width)
        return model(x, cache=cache, reservation=cache.reserve(width), **kwargs), cache

    for start in range(4, width, size):
        (logits, cache), (eager_logits, eager) = filled(fast), filled(net)
        assert_close(logits, eager_logits)
        prefix, prefix_eager = filled(fast)[1], filled(net)[1]
        prefix.truncate_all(start)
        prefix_eager.truncate_all(start)
        end = start + size
        counts = []
        for step in range(2):
            x[:, start + step] = step + 1  # a commit
            with prefix.claim(width - start, keep=0) as plan, prefix_eager.claim(width - start, keep=0) as eager_plan:
                assert_close(fast(x[:, start:], cache=prefix, reservation=plan, **window(kwargs, start)),
                             net(x[:, start:], cache=prefix_eager, reservation=eager_plan, **window(kwargs, start)))
            assert_close(fast(x[:, start:end], cache=cache, reservation=cache.overwrite(start, size),
                              **window(kwargs, start, end)),
                         net(x[:, start:end], cache=eager, reservation=eager.overwrite(start, size),
                             **window(kwargs, start, end)))
            counts.append(graphs.frame_count)
        assert counts[1] == counts[0]
        assert_same_caches(eager, cache)


@torch.no_grad()
def test_qwen3_cached_steps_of_uneven_rows_share_a_graph(graphs):
    """ReFusion's calls on the Qwen3 network: rows of different lengths in one KVBuffer, the default causal mask, an
    explicit 4-D mask and a grouped layout (attended densely when compiled), a row truncated between steps; a call
    like the one before it compiles nothing, whatever the lengths."""
    net = network("qwen3")
    fast = CompiledNetwork(net)
    eager, cache = net.new_cache(2, 64), fast.new_cache(2, 64)
    prompt = tokens(2, 8, 0)
    assert_close(fast(prompt, cache=cache), net(prompt, cache=eager))
    for c in (eager, cache):
        c.truncate(0, 5)
    counts = []
    for step, form in enumerate(["causal", "causal", "mask", "mask", "grouped"]):
        x = tokens(2, 4, step + 1)
        kwargs = {"logits_to_keep": 2}
        if form == "mask":  # each row causal over its own entries, spelled out
            lengths = torch.tensor(cache.lengths)[:, None, None, None]
            kwargs = {"attention_mask": torch.arange(max(cache.lengths) + 4) <= lengths + torch.arange(4)[:, None]}
        elif form == "grouped":
            kwargs = {"attention_mask": GroupedWindows.causal(list(cache.lengths), [4, 4], 4)}
        assert_close(fast(x, cache=cache, **kwargs), net(x, cache=eager, **kwargs))
        assert_same_caches(eager, cache)
        for c in (eager, cache):
            c.truncate(1, c.lengths[1] - 1)
        counts.append(graphs.frame_count)
    assert counts[1] == counts[0] and counts[4] == counts[3] == counts[2]


@pytest.mark.parametrize("kind", ["qwen3", "fastdllm-v2", "llada2"])
@torch.no_grad()
def test_block_forward_steps_compile_to_one_graph(kind, graphs):
    """SDAR/TraDo (Qwen3), Fast-dLLM v2 (Qwen2) and LLaDA2 (MoE): a prefill, then per block peeks, a fused commit
    and peek, and a commit; the first block on rows of different lengths, the second in lockstep (where eager writes
    a slice and may skip the mask). Every step of both blocks is one graph."""
    net = network(kind)
    fast = CompiledNetwork(net)
    eager, cache = net.new_cache(2, 32), fast.new_cache(2, 32)
    prompt = tokens(2, 2 * BLOCK, 0)
    for model, c in ((net, eager), (fast, cache)):
        model.block_forward(prompt, torch.arange(2 * BLOCK)[None], c, BLOCK, True)
        c.truncate(0, BLOCK + 1)
    before = graphs.frame_count
    for block in range(2):
        start = 2 * BLOCK + block * BLOCK
        positions = torch.arange(start, start + BLOCK)[None]
        for write in (False, False, 2, True):
            x = tokens(2, BLOCK, 10 * block + int(write))
            assert_close(fast.block_forward(x, positions, cache, BLOCK, write),
                         net.block_forward(x, positions, eager, BLOCK, write))
            assert_same_caches(eager, cache)
        for c in (eager, cache):
            c.truncate(1, c.lengths[0])
    assert graphs.frame_count - before == 1


def test_dense_experts_equal_the_grouped_ones():
    """The compiled LLaDA2 MoE's expert sum (every expert on every token, the chosen ones gathered) is the grouped
    eager sum."""
    net = network("llada2")
    moe = net.model.layers[1].mlp
    x = torch.randn(10, net.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        route = moe.gate(x)
        assert_close(mix_experts_dense(x, moe.experts, *route), mix_experts(x, moe.experts, *route))
