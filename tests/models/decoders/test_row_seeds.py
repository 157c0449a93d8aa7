"""Each sample of a sampled decoder draws from its own stream: the same in any batch, different across samples."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from diffusion_stubs import TinyBidirectionalNet, commits_per_call
from models.base import GenerationRequest, Message
from models.decoders.dream import DreamConfig, dream_generate
from models.decoders.fastdllm.dream_sampler import FastDreamConfig, fastdllm_dream_generate
from models.decoders.fastdllm.llada_sampler import FastLLaDAConfig, fastdllm_llada_generate
from models.decoders.llada import LLaDAConfig, llada_generate
from models.decoders.sampling import row_seed
from models.networks.dream import tiny_dream_config
from models.networks.llada import tiny_llada_config
from models.networks.loading import build_network
from models.registry import load_adapter, spec_for

V, MASK, EOS, EOT = 16, 15, 14, 13
LLADA = LLaDAConfig(gen_length=8, steps=8, block_length=8, temperature=1.0, remasking="random", mask_id=MASK,
                    eos_id=EOS, eot_id=EOT)
DREAMS = [DreamConfig(max_new_tokens=8, steps=4, temperature=0.8, alg="origin", mask_id=MASK, eos_ids=(EOS,)),
          DreamConfig(max_new_tokens=8, steps=4, temperature=0.8, alg="entropy", mask_id=MASK, eos_ids=(EOS,)),
          DreamConfig(max_new_tokens=8, steps=8, temperature=0.8, alg="maskgit_plus", alg_temp=0.5, mask_id=MASK,
                      eos_ids=(EOS,))]
SHORT, LONG = [3, 7, 2], [4, 1, 8, 8, 6, 5]
SEEDS = (row_seed(1234, "short"), row_seed(1234, "long"))
BATCH = torch.tensor([[EOS] * 3 + SHORT, LONG])
MASK_2D = torch.tensor([[0, 0, 0, 1, 1, 1], [1] * 6])


def test_row_seeds_differ_by_sample_and_repeat():
    assert row_seed(1234, "a") == row_seed(1234, "a")
    assert len({row_seed(1234, "a"), row_seed(1234, "b"), row_seed(1235, "a")}) == 3
    assert 0 <= row_seed(1, "x") < 2**63


def test_llada_row_alone_equals_row_in_a_batch():
    net = TinyBidirectionalNet(V, banned=(MASK,), seed=1)
    together = llada_generate(net, BATCH, MASK_2D, LLADA, row_seeds=SEEDS)
    for row, (prompt, seed) in enumerate(zip((SHORT, LONG), SEEDS)):
        alone = llada_generate(net, torch.tensor([prompt]), None, LLADA, row_seeds=(seed,))
        assert torch.equal(together.tokens[row], alone.tokens[0])


def test_llada_one_row_seed_is_the_plain_seed_path():
    net = TinyBidirectionalNet(V, banned=(MASK,), seed=2)
    prompt = torch.tensor([LONG])
    for changes in ({}, {"remasking": "low_confidence"}):
        c = dataclasses.replace(LLADA, **changes)
        plain = llada_generate(net, prompt, None, dataclasses.replace(c, seed=99))
        assert torch.equal(llada_generate(net, prompt, None, c, row_seeds=(99,)).tokens, plain.tokens)


def commit_order(net: TinyBidirectionalNet, prompt: list[int], **kwargs) -> list[list[int]]:
    net.calls.clear()
    x = torch.tensor([prompt])
    out = llada_generate(net, x, None, kwargs.pop("config", LLADA), **kwargs)
    final = torch.cat([x, out.tokens], dim=1)
    return [c[0].nonzero().flatten().tolist() for c in commits_per_call(net.calls, final, MASK)]


def test_llada_different_samples_commit_in_different_orders():
    net = TinyBidirectionalNet(V, banned=(MASK,), seed=3)
    one, other = LONG, LONG[::-1]
    # one seed for every decode call (the old way): random remasking commits any two prompts in one order
    shared = dataclasses.replace(LLADA, seed=5)
    assert commit_order(net, one, config=shared) == commit_order(net, other, config=shared)
    assert commit_order(net, one, row_seeds=(SEEDS[0],)) != commit_order(net, other, row_seeds=(SEEDS[1],))


@pytest.mark.parametrize("config", DREAMS, ids=lambda c: c.alg)
def test_dream_row_alone_equals_row_in_a_batch(config):
    net = TinyBidirectionalNet(V, positional="absolute", banned=(MASK,), seed=5)
    together = dream_generate(net, BATCH, MASK_2D, config, row_seeds=SEEDS)
    alone = [dream_generate(net, torch.tensor([p]), None, config, row_seeds=(s,)).tokens[0]
             for p, s in zip((SHORT, LONG), SEEDS)]
    assert torch.equal(together.tokens, torch.stack(alone))
    swapped = dream_generate(net, BATCH, MASK_2D, config, row_seeds=SEEDS[::-1])
    assert not torch.equal(swapped.tokens, together.tokens)  # the stream, not the batch position, decides


def test_dream_one_row_seed_is_the_plain_seed_path():
    net = TinyBidirectionalNet(V, positional="absolute", banned=(MASK,), seed=6)
    prompt = torch.tensor([LONG])
    for config in DREAMS:
        plain = dream_generate(net, prompt, None, dataclasses.replace(config, seed=7)).tokens
        assert torch.equal(dream_generate(net, prompt, None, config, row_seeds=(7,)).tokens, plain)


SAMPLED_DREAM = DreamConfig(max_new_tokens=16, steps=4, temperature=0.8, alg="entropy", mask_id=MASK, eos_ids=(EOS,))
FAST_DREAMS = {  # every Fast-dLLM Dream path that draws: no cache + threshold, both caches, the entropy draw
    "none-threshold": FastDreamConfig(SAMPLED_DREAM, block_length=8, threshold=0.3, cache="none"),
    "prefix-threshold": FastDreamConfig(SAMPLED_DREAM, block_length=8, threshold=0.3, cache="prefix"),
    "dual-threshold": FastDreamConfig(SAMPLED_DREAM, block_length=8, threshold=0.3, cache="dual"),
    "dual-entropy-alg-temp": FastDreamConfig(dataclasses.replace(SAMPLED_DREAM, steps=8, alg_temp=0.5),
                                             block_length=8, threshold=None, cache="dual"),
}
FAST_LLADAS = {
    "dual-threshold": FastLLaDAConfig(dataclasses.replace(LLADA, gen_length=16, steps=16, temperature=0.8,
                                                          remasking="low_confidence"), threshold=0.3, cache="dual"),
    "prefix-random": FastLLaDAConfig(dataclasses.replace(LLADA, gen_length=16, steps=16), threshold=None,
                                     cache="prefix"),
}


def fast_decode(config, prompt_ids, mask, seeds):
    """A Fast-dLLM decode on a tiny native network (its cache is real), the mask id never proposed."""
    if isinstance(config, FastDreamConfig):
        net, generate = build_network(tiny_dream_config(V), seed=0), fastdllm_dream_generate
    else:
        net, generate = build_network(tiny_llada_config(V), seed=0), fastdllm_llada_generate

    def no_mask(ids, **kwargs):
        logits = net(ids, **kwargs).clone()
        logits[..., MASK] = -1e4
        return logits

    no_mask.new_cache = net.new_cache  # the cached modes allocate the network's KVBuffer

    return generate(no_mask, prompt_ids, mask, config, row_seeds=seeds).tokens


@pytest.mark.parametrize("config", [*FAST_DREAMS.values(), *FAST_LLADAS.values()],
                         ids=[f"dream-{k}" for k in FAST_DREAMS] + [f"llada-{k}" for k in FAST_LLADAS])
def test_fastdllm_row_alone_equals_row_in_a_batch(config):
    together = fast_decode(config, BATCH, MASK_2D, SEEDS)
    alone = [fast_decode(config, torch.tensor([p]), None, (s,))[0] for p, s in zip((SHORT, LONG), SEEDS)]
    assert torch.equal(together, torch.stack(alone))
    swapped = fast_decode(config, BATCH, MASK_2D, SEEDS[::-1])
    assert not torch.equal(swapped, together)  # the stream, not the batch position, decides


def chat(question: str, canvas: int = 16) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", question),), canvas_tokens=canvas)


@pytest.mark.parametrize("name,options", [
    ("tiny-llada", {"steps": 16, "temperature": 1.0, "remasking": "random", "seed": 7}),
    ("tiny-dream", {"steps": 8, "temperature": 1.0, "alg": "origin", "seed": 7}),
    ("tiny-qwen3", {"do_sample": True, "temperature": 1.0, "seed": 7}),
    ("tiny-dream-fastdllm", {"temperature": 1.0, "threshold": 0.3, "block_length": 8, "seed": 7}),
    ("tiny-llada-fastdllm", {"temperature": 1.0, "threshold": 0.3, "block_length": 8, "seed": 7}),
])
def test_adapter_sample_is_the_same_alone_and_in_a_batch(name, options):
    adapter = load_adapter(spec_for(name), torch.device("cpu"), torch.float32)
    config = adapter.make_config(options)
    a, b = chat("What is 2 + 2?"), chat("A much longer question about apples, pears and 17 oranges?")
    batch = adapter.prepare([a, b], config)
    assert batch.row_seeds is not None and len(set(batch.row_seeds)) == 2
    (alone,) = adapter.generate([a], config)
    pair = adapter.generate([b, a], config)
    assert pair[1].token_ids == alone.token_ids
    assert adapter.prepare([a], adapter.make_config({k: v for k, v in options.items() if k != "seed"})).row_seeds \
        is None
