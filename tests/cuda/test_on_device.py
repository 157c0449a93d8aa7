"""The GPU user's path, on a CUDA device: every check compares the device against an independent computation (the
CPU, transformers on the same device, an unsynchronised timer), so nothing here can pass by agreeing with itself.

Skipped without CUDA (CI has none); on a GPU box run ``benchmarks/device_check.sh``, which runs these first.
``DLLM_TEST_DEVICE=cpu`` runs the same checks with the CPU as the device under test, to test the tests themselves.
"""

from __future__ import annotations

import copy
import os
import time

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from harness.timing.forward_timer import ForwardTimer
from harness.timing.clock import timed
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row, refusion_decode_rows
from models.decoders.sampling import as_logits
from models.networks.loading import load_network
from models.registry import load_adapter, spec_for
from models.tiny import materialize
from adapter_cases import CASES, REQUESTS
from refusion_stubs import NudgedNative, native_copy, tiny_qwen

DEVICE = torch.device(os.environ.get("DLLM_TEST_DEVICE", "cuda"))
CPU = torch.device("cpu")
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    pytest.skip("needs a CUDA device: run benchmarks/device_check.sh on a GPU box", allow_module_level=True)

# Qwen3-8B's shapes scaled down: head_dim 128, 4:1 grouped-query heads (on CUDA the q heads are stacked, a path the
# CPU never takes), qk-norm, untied head.
SCALED_8B = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=1, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
                 max_position_embeddings=4096, tie_word_embeddings=False, vocab_size=300)


def ids(vocab: int, b: int, n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (b, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=["tiny-refusion", "scaled-8b"])
def qwen3_pair(request, tmp_path_factory):
    """transformers' Qwen3ForCausalLM and the native network, same weights, fp32, both on the device."""
    if request.param == "tiny-refusion":
        folder = materialize("tiny-refusion")
        hf = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    else:
        torch.manual_seed(0)
        hf = Qwen3ForCausalLM(Qwen3Config(initializer_range=0.1, **SCALED_8B))
        folder = tmp_path_factory.mktemp("q3") / "scaled-8b"
        hf.save_pretrained(folder)
    native = load_network(folder, "qwen3", dtype=torch.float32, device=DEVICE)
    return hf.to(DEVICE).eval(), native


@torch.no_grad()
def test_qwen3_network_matches_transformers_on_the_device(qwen3_pair):
    """Full forward, then the same tokens fed through the index-written KV buffer with explicit positions."""
    hf, native = qwen3_pair
    x = ids(hf.config.vocab_size, 2, 24, 1).to(DEVICE)
    theirs = hf(input_ids=x).logits
    assert (native(x) - theirs).abs().max() < 1e-4
    cache = native.new_cache(batch=2, capacity=32)
    native(x[:, :10], cache=cache)
    pos = torch.arange(10, 24, device=DEVICE)[None].expand(2, -1)
    stepped = native(x[:, 10:], position_ids=pos, cache=cache)
    assert (stepped - theirs[:, 10:]).abs().max() < 1e-4


@torch.no_grad()
def test_qwen3_network_in_bfloat16_is_as_close_to_fp32_as_transformers(qwen3_pair):
    """bf16 is what a GPU run uses: the native network's bf16 error against fp32 is no worse than transformers'."""
    hf, native = qwen3_pair
    x = ids(hf.config.vocab_size, 2, 24, 2).to(DEVICE)
    reference = hf(input_ids=x).logits
    hf_error = (copy.deepcopy(hf).to(torch.bfloat16)(input_ids=x).logits.float() - reference).abs().max()
    native_error = (copy.deepcopy(native).to(torch.bfloat16)(x).float() - reference).abs().max()
    assert native_error <= 2 * hf_error + 1e-3, (native_error, hf_error)


@pytest.mark.parametrize("kind", ["llada", "dream"])
@torch.no_grad()
def test_diffusion_networks_on_the_device_match_the_cpu(kind):
    folder = materialize(f"tiny-{kind}")
    on_cpu, on_device = (load_network(folder, kind, dtype=torch.float32, device=d) for d in (CPU, DEVICE))
    x = ids(on_cpu.config.vocab_size, 2, 20, 3)
    expected = as_logits(on_cpu(x))
    assert (as_logits(on_device(x.to(DEVICE))).cpu() - expected).abs().max() < 1e-4


def nudged_refusion() -> tuple[NudgedNative, RefusionConfig, list[torch.Tensor]]:
    """A real tiny network nudged towards a scripted answer: slots are accepted at different rounds, rows end at an
    end-of-sequence at different times, and decisions sit far from the thresholds (no near-ties)."""
    answer = torch.randint(0, 95, (80,), generator=torch.Generator().manual_seed(0)).tolist()
    net = NudgedNative(native_copy(tiny_qwen(vocab=96, seed=1, sharpness=25.0)), 95, answer, 15.0)
    cfg = RefusionConfig(gen_length=32, slot_size=4, serial_num_blocks=2, slot_threshold=0.6, token_threshold=0.6,
                         mask_id=95, eos_id=answer[22])
    prompts = [torch.randint(0, 94, (n,), generator=torch.Generator().manual_seed(n)) for n in (5, 11, 2, 8)]
    return net, cfg, prompts


def test_refusion_on_the_device_gives_the_cpu_tokens_alone_and_batched():
    net, cfg, prompts = nudged_refusion()
    on_cpu = [refusion_decode_row(net, p[None], cfg) for p in prompts]
    net.to(DEVICE)
    alone = [refusion_decode_row(net, p[None].to(DEVICE), cfg) for p in prompts]
    together = refusion_decode_rows(net, [p.to(DEVICE) for p in prompts], cfg)
    expected = [o.token_ids for o in on_cpu]
    assert [o.token_ids for o in alone] == expected
    assert [o.token_ids for o in together] == expected
    assert [o.nfe for o in alone] == [o.nfe for o in on_cpu]
    assert len({o.nfe for o in on_cpu}) > 1, "rows should finish at different rounds"


@pytest.mark.slow
def test_compiled_native_network_on_the_device_is_token_identical_to_eager():
    """``refusion.compile=true`` is the path a GPU user takes: the same tokens and forwards as eager."""
    net, cfg, prompts = nudged_refusion()
    net.to(DEVICE)
    batch = [p.to(DEVICE) for p in prompts]
    eager = refusion_decode_rows(net, batch, cfg)
    compiled = refusion_decode_rows(torch.compile(net, dynamic=True), batch, cfg)
    assert [o.token_ids for o in compiled] == [o.token_ids for o in eager]
    assert [o.nfe for o in compiled] == [o.nfe for o in eager]


def test_timing_waits_for_the_device():
    """``timed`` and ``ForwardTimer`` see work the device has queued, which a plain host timer does not."""
    if DEVICE.type != "cuda":
        pytest.skip("a host-side timer already waits on the CPU")
    start = time.perf_counter()
    torch.cuda._sleep(200_000_000)  # returns at once; the device spins for ~0.1 s
    unsynchronised = time.perf_counter() - start
    _, seconds = timed(DEVICE, lambda: torch.cuda._sleep(200_000_000))
    assert seconds > 5 * unsynchronised and seconds > 0.02

    class Spin(torch.nn.Module):
        def forward(self, x):
            torch.cuda._sleep(100_000_000)
            return x

    spin = Spin()
    with ForwardTimer(spin, DEVICE) as forwards:
        _, total = timed(DEVICE, lambda: [spin(torch.zeros(1, device=DEVICE)) for _ in range(3)])
    assert forwards.calls == 3
    assert 0.5 * total < forwards.seconds() <= total


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("name", list(CASES))
def test_every_adapter_generates_a_left_padded_batch_on_the_device(name, dtype):
    """Every model kind end to end on the device (tokenizer, network, decoder, accounting), a batch of two prompts
    of different lengths, in the dtype a GPU run defaults to and in fp32."""
    adapter = load_adapter(spec_for(name), DEVICE, dtype)
    config = adapter.make_config(CASES[name])
    requests = REQUESTS[:2]  # no prefill: two plain prompts of different lengths
    generations = adapter.generate(requests, config)
    eos = set(adapter.eos_ids())
    assert len(generations) == 2
    for gen, request in zip(generations, requests):
        assert 0 < gen.gen_tokens == len(gen.token_ids) <= request.canvas_tokens
        assert gen.hit_max_tokens == (not eos & set(gen.token_ids))
        assert gen.nfe > 0
