"""Rows in flight (``Decoder.stream``) of the diffusion decoders: every row's token ids and forward count equal its
prompt decoded alone (fp32), whatever its neighbours and whenever it was admitted. Mixed prompt lengths, more
prompts than rows (up to 32 rows of 40 prompts), rows that end early, late or never, greedy and seeded sampling, on
tiny real networks (the native ones with their LM head at the cells a step reads, where the decoder asks)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator

import pytest
import torch

from diffusion_stubs import TinyBidirectionalNet
from models.base import GenerationRequest, Message
from models.decoders.contract import DecodeResult, Step
from models.decoders.dream import DREAM, DreamConfig
from models.decoders.fastdllm.dream_sampler import FAST_DREAM, FastDreamConfig
from models.decoders.fastdllm.llada_sampler import FAST_LLADA, FastLLaDAConfig
from models.decoders.llada import LLADA, LLaDAConfig
from models.decoders.sampling import row_seed
from models.networks.dream import tiny_dream_config
from models.networks.llada import tiny_llada_config
from models.networks.loading import build_network
from models.registry import load_adapter, spec_for

V, MASK, EOS, EOT = 16, 15, 14, 13
PROMPTS = [[3, 7, 2], [4, 1, 8, 8, 6, 5], [9, 4], [2, 5, 2, 1], [5, 6, 7, 8, 9, 10, 11]]
SEEDS = tuple(row_seed(1234, str(i)) for i in range(len(PROMPTS)))
ROWS = 2


class EndProne(torch.nn.Module):
    """A network with the end-of-sequence logit raised, so rows end early, late or not at all, and the mask id never
    proposed; counts its calls."""

    def __init__(self, network: Callable[..., torch.Tensor], boost: float) -> None:
        super().__init__()
        self.network, self.boost, self.calls = network, boost, 0
        self.reads_cells = bool(getattr(network, "reads_cells", False))  # ``read=`` passes through to the network

    def forward(self, ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.calls += 1
        logits = self.network(ids, **kwargs).clone()
        logits[..., EOS] += self.boost
        logits[..., MASK] = -1e4
        return logits

    def new_cache(self, batch: int, capacity: int) -> Any:
        return self.network.new_cache(batch, capacity)


def drain(steps: Iterator[Step], max_rows: int, count: int = len(PROMPTS)) -> dict[int, DecodeResult]:
    """Each of ``count`` prompts' result; every prompt admitted once and finished once, never more than ``max_rows``
    rows in a step."""
    results: dict[int, DecodeResult] = {}
    admitted: list[int] = []
    for step in steps:
        assert 0 < step.rows <= max_rows
        admitted += step.admitted
        for index, result in step.finished:
            assert index not in results
            results[index] = result
    assert sorted(admitted) == sorted(results) == list(range(count))
    return results


def assert_rows_decode_alone(decoder: Any, network: EndProne, config: Any, seeds: tuple[int, ...] | None,
                             prompt_ids: list[list[int]] = PROMPTS, rows: int = ROWS) -> list[DecodeResult]:
    """The stream's rows against each prompt decoded alone at batch 1 (with its own seed); returns the stream's."""
    prompts = [torch.tensor(p) for p in prompt_ids]
    results = drain(decoder.stream(network, prompts, config, rows, seeds), rows, len(prompts))
    calls, network.calls = network.calls, 0
    for i, prompt in enumerate(prompts):
        extra = {} if seeds is None else {"row_seeds": (seeds[i],)}
        (alone,) = decoder.generate(network, prompt[None], None, config, **extra).rows
        assert results[i].token_ids == alone.token_ids, i
        assert results[i].hit_max_tokens == alone.hit_max_tokens
        assert results[i].forwards == alone.forwards
        assert results[i].commit_step == alone.commit_step and len(alone.commit_step) == len(alone.token_ids)
    assert sum(r.nfe for r in results.values()) == pytest.approx(calls)  # each call split across its rows
    return [results[i] for i in range(len(prompts))]


def stub(positional: str, seed: int = 3, boost: float = 1.5) -> EndProne:
    return EndProne(TinyBidirectionalNet(V, positional=positional, banned=(MASK,), seed=seed), boost)


def native(config: Any) -> EndProne:
    return EndProne(build_network(config, seed=0), 1.0)


LLADA_BASE = LLaDAConfig(gen_length=8, steps=8, block_length=8, mask_id=MASK, eos_id=EOS, eot_id=EOT)
LLADAS = {
    "greedy": LLADA_BASE,
    "blocks": dataclasses.replace(LLADA_BASE, block_length=4, steps=4),
    "gumbel": dataclasses.replace(LLADA_BASE, temperature=0.8),
    "random-remasking": dataclasses.replace(LLADA_BASE, temperature=1.0, remasking="random", block_length=4),
    "cfg": dataclasses.replace(LLADA_BASE, cfg_scale=0.5),
    "eos-options": dataclasses.replace(LLADA_BASE, logits_eos_inf=True, confidence_eos_eot_inf=True),
}


@pytest.mark.parametrize("network", [lambda: stub("rope"), lambda: native(tiny_llada_config(V))],
                         ids=["stub", "native"])
@pytest.mark.parametrize("name", list(LLADAS))
def test_llada_rows_in_flight_decode_as_alone(network, name):
    config = LLADAS[name]
    samples = config.temperature > 0 or config.remasking == "random"
    assert_rows_decode_alone(LLADA, network(), config, SEEDS if samples else None)


DREAM_BASE = DreamConfig(max_new_tokens=8, steps=4, mask_id=MASK, eos_ids=(EOS, EOT))
DREAMS = {
    "entropy": DREAM_BASE,
    "margin-top-p": dataclasses.replace(DREAM_BASE, alg="topk_margin", top_p=0.9, steps=8),
    "origin": dataclasses.replace(DREAM_BASE, temperature=0.8, alg="origin"),
    "maskgit-alg-temp": dataclasses.replace(DREAM_BASE, temperature=0.8, alg="maskgit_plus", alg_temp=0.5, steps=8),
}


@pytest.mark.parametrize("network", [lambda: stub("absolute"), lambda: native(tiny_dream_config(V))],
                         ids=["stub", "native"])
@pytest.mark.parametrize("name", list(DREAMS))
def test_dream_rows_in_flight_decode_as_alone(network, name):
    config = DREAMS[name]
    samples = config.temperature > 0 or config.alg == "origin" or bool(config.alg_temp)
    assert_rows_decode_alone(DREAM, network(), config, SEEDS if samples else None)


FAST_LLADA_BASE = dataclasses.replace(LLADA_BASE, gen_length=16, steps=16, block_length=4)
FAST_LLADAS = {
    "top-k": FastLLaDAConfig(FAST_LLADA_BASE, threshold=None),
    "threshold": FastLLaDAConfig(FAST_LLADA_BASE, threshold=0.3),
    "threshold-gumbel": FastLLaDAConfig(dataclasses.replace(FAST_LLADA_BASE, temperature=0.8), threshold=0.3),
    "threshold-random": FastLLaDAConfig(dataclasses.replace(FAST_LLADA_BASE, temperature=1.0, remasking="random"),
                                        threshold=0.3),
}


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("name", list(FAST_LLADAS))
def test_fastdllm_llada_rows_in_flight_decode_as_alone(cache, name):
    """With a threshold the rows' blocks take different numbers of steps, so rows at a block start share steps with
    rows inside one (two forwards in a cached step)."""
    config = dataclasses.replace(FAST_LLADAS[name], cache=cache)
    samples = config.llada.temperature > 0 or config.llada.remasking == "random"
    assert_rows_decode_alone(FAST_LLADA, native(tiny_llada_config(V)), config, SEEDS if samples else None)


@pytest.mark.parametrize("kind", ["llada", "dream"])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_fastdllm_rows_in_flight_read_the_full_head_where_a_network_has_no_read(kind, cache):
    """The rows' calls ask the head at the cells a step reads (``read=``); a network without it hands back every
    column's logits and the stream gathers them, with the same tokens."""
    decoder, network = (FAST_LLADA, native(tiny_llada_config(V))) if kind == "llada" else \
        (FAST_DREAM, native(tiny_dream_config(V)))
    config = dataclasses.replace(FAST_LLADAS["threshold"] if kind == "llada" else FAST_DREAMS["threshold"], cache=cache)
    prompts = [torch.tensor(p) for p in PROMPTS]
    asked = []
    network.register_forward_pre_hook(lambda _, args, kwargs: asked.append(kwargs.get("read") is not None),
                                      with_kwargs=True)
    cells = drain(decoder.stream(network, prompts, config, ROWS, None), ROWS)
    assert asked and all(asked)
    network.reads_cells, asked[:] = False, []
    full = drain(decoder.stream(network, prompts, config, ROWS, None), ROWS)
    assert asked and not any(asked)
    assert {i: r.token_ids for i, r in cells.items()} == {i: r.token_ids for i, r in full.items()}


FAST_DREAM_BASE = dataclasses.replace(DREAM_BASE, max_new_tokens=16, steps=8)
FAST_DREAMS = {
    "entropy": FastDreamConfig(FAST_DREAM_BASE, block_length=4, threshold=None),
    "entropy-alg-temp": FastDreamConfig(dataclasses.replace(FAST_DREAM_BASE, temperature=0.8, alg_temp=0.5),
                                        block_length=4, threshold=None),
    "threshold": FastDreamConfig(FAST_DREAM_BASE, block_length=4, threshold=0.3),
    "threshold-sampled": FastDreamConfig(dataclasses.replace(FAST_DREAM_BASE, temperature=0.8), block_length=4,
                                         threshold=0.3),
    "one-token-blocks": FastDreamConfig(dataclasses.replace(FAST_DREAM_BASE, max_new_tokens=4, steps=4),
                                        block_length=1, threshold=None),
}


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("name", list(FAST_DREAMS))
def test_fastdllm_dream_rows_in_flight_decode_as_alone(cache, name):
    """Cached, a block's full forward also commits its first token; without a cache and a threshold it is plain
    Dream's stream."""
    config = dataclasses.replace(FAST_DREAMS[name], cache=cache)
    samples = config.dream.temperature > 0 or bool(config.dream.alg_temp)
    assert_rows_decode_alone(FAST_DREAM, native(tiny_dream_config(V)), config, SEEDS if samples else None)


MANY = [[(5 * i + 3 * j) % 13 for j in range(1 + (7 * i) % 9)] for i in range(40)]  # 40 prompts of 1-9 ids
MANY_SEEDS = tuple(row_seed(1234, str(i)) for i in range(len(MANY)))
FAST_AT_32 = {"llada": (FAST_LLADA, tiny_llada_config, FAST_LLADAS),
              "dream": (FAST_DREAM, tiny_dream_config, FAST_DREAMS)}
QUICK_AT_32 = ("llada", "threshold", "dual")  # the others run with the slow tests (each takes several seconds)


@pytest.mark.parametrize("kind,name,cache", [
    pytest.param(kind, name, cache, marks=() if (kind, name, cache) == QUICK_AT_32 else pytest.mark.slow)
    for kind, names in (("llada", ("threshold", "threshold-random")), ("dream", ("threshold", "entropy-alg-temp")))
    for name in names for cache in ("none", "prefix", "dual")])
def test_fastdllm_32_rows_in_flight_decode_as_alone(kind, name, cache):
    """32 rows in flight over 40 prompts of mixed lengths, greedy and seeded sampling: the rows' thresholds put them
    at different blocks and steps (cached, rows at a block start beside rows inside one), a freed slot takes a
    waiting prompt, and every row is still its prompt alone."""
    decoder, net_config, configs = FAST_AT_32[kind]
    config = dataclasses.replace(configs[name], cache=cache)
    seeds = None if name == "threshold" else MANY_SEEDS
    assert_rows_decode_alone(decoder, native(net_config(V)), config, seeds, MANY, 32)


@pytest.mark.parametrize("decoder,config,network", [(LLADA, LLADA_BASE, lambda: stub("rope", 0, 3.0)),
                                                    (DREAM, DREAM_BASE, lambda: stub("absolute", 1, 1.0))],
                         ids=["llada", "dream"])
def test_rows_end_early_late_or_never(decoder, config, network):
    """The canvas runs whole (these decoders never stop at end of sequence); each row is cut at its own."""
    results = assert_rows_decode_alone(decoder, network(), config, None)
    lengths = [None if r.hit_max_tokens else len(r.token_ids) for r in results]
    assert None in lengths and min(n for n in lengths if n) <= 4 and max(n for n in lengths if n) >= 5


def test_without_row_seeds_the_rows_share_one_generator():
    """No row seeds: one generator (``seed``) serves every row, so a row's draws depend on its neighbours."""
    config = dataclasses.replace(LLADAS["random-remasking"], seed=5)
    prompts = [torch.tensor(p) for p in PROMPTS]
    once = drain(LLADA.stream(stub("rope"), prompts, config, ROWS, None), ROWS)
    again = drain(LLADA.stream(stub("rope"), prompts, config, ROWS, None), ROWS)
    assert once == again


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_a_cached_step_runs_rows_at_a_block_start_beside_rows_inside_one(cache):
    """Blocks of different lengths put the rows out of phase: some steps make two calls, each row in one of them."""
    network = native(tiny_llada_config(V))
    config = dataclasses.replace(FAST_LLADAS["threshold"], cache=cache)
    steps = list(FAST_LLADA.stream(network, [torch.tensor(p) for p in PROMPTS], config, ROWS, None))
    assert len(steps) < network.calls <= 2 * len(steps)


def test_one_row_or_more_rows_than_prompts():
    prompts = [torch.tensor(p) for p in PROMPTS]
    config = dataclasses.replace(FAST_LLADAS["threshold"], cache="dual")
    alone = drain(FAST_LLADA.stream(native(tiny_llada_config(V)), prompts, config, 1, None), 1)
    many = drain(FAST_LLADA.stream(native(tiny_llada_config(V)), prompts, config, len(PROMPTS) + 3, None),
                 len(PROMPTS) + 3)
    assert all(r.nfe == r.forwards for r in alone.values())
    for i, result in many.items():
        assert (result.token_ids, result.forwards, result.commit_step) == \
            (alone[i].token_ids, alone[i].forwards, alone[i].commit_step)
    with pytest.raises(ValueError, match="max_rows"):
        next(LLADA.stream(stub("rope"), prompts, LLADA_BASE, 0, None))


QUESTIONS = ["What is 2 + 2?", "A much longer question about apples, pears and 17 oranges?", "Why?",
             "Name three rivers of Europe, please."]


@pytest.mark.parametrize("name,options", [
    ("tiny-llada", {"steps": 16, "temperature": 1.0, "remasking": "random", "seed": 7}),
    ("tiny-dream", {"steps": 8, "temperature": 1.0, "alg": "origin", "seed": 7}),
    ("tiny-llada-fastdllm", {"temperature": 1.0, "threshold": 0.3, "block_length": 8, "seed": 7}),
    ("tiny-dream-fastdllm", {"temperature": 1.0, "threshold": 0.3, "block_length": 8, "seed": 7}),
])
def test_adapter_rows_in_flight_sample_as_alone(name, options):
    """Through the adapter (row seeds from the run seed and each prompt): a sampled request's generation in flight
    is its generation alone."""
    adapter = load_adapter(spec_for(name), torch.device("cpu"), torch.float32)
    config = adapter.make_config(options)
    requests = [GenerationRequest(messages=(Message("user", q),), canvas_tokens=16) for q in QUESTIONS]
    batch = adapter.prepare(requests, config)
    assert batch.row_seeds is not None
    finished = [pair for step in adapter.stream(batch, ROWS) for pair in step.finished]
    assert sorted(i for i, _ in finished) == list(range(len(requests)))
    for (i, _), generation in zip(finished, adapter.finish_some(batch, finished)):
        (alone,) = adapter.generate([requests[i]], config)
        assert generation.token_ids == alone.token_ids
