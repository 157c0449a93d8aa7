"""tiny-diffusiongemma on a CUDA device: the device draws its own random numbers, so its tokens are not the CPU's;
what must hold there is what holds on the CPU: a seeded call is reproducible, a batch of one is transformers'
generate seeded by hand on the same device, and the forward timer sees less time than the decode took.

Skipped without CUDA; ``DLLM_TEST_DEVICE=cpu`` runs the same checks on the CPU.
"""

from __future__ import annotations

import os

import pytest
import torch

from harness.run.generation import generate_timed
from models.base import GenerationRequest, Message
from models.decoders.sampling import row_seed
from models.registry import load_adapter, spec_for

DEVICE = torch.device(os.environ.get("DLLM_TEST_DEVICE", "cuda"))
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    pytest.skip("needs a CUDA device: run benchmarks/device_check.sh on a GPU box", allow_module_level=True)

SEED = 1234
REQUESTS = [GenerationRequest(messages=(Message("user", q),), canvas_tokens=24)
            for q in ("What is 2 + 2?", "A much longer question about apples, pears and 17 oranges?")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_diffusiongemma_on_the_device_is_seeded_counted_and_timed(dtype):
    adapter = load_adapter(spec_for("tiny-diffusiongemma"), DEVICE, dtype)
    config = adapter.make_config({"max_denoising_steps": 3}, seed=SEED)
    first = adapter.generate(REQUESTS, config)
    _, again, seconds, forward_s = generate_timed(adapter, config, REQUESTS)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert 0 < forward_s <= seconds
    for gen in again:
        assert 0 < gen.gen_tokens <= 24 and gen.nfe == (gen.encoder_calls + gen.decoder_calls) / 2

    (alone,) = adapter.generate(REQUESTS[:1], config)
    prompt = adapter.render(REQUESTS[0], config)
    ids = torch.tensor([adapter.tokenizer(prompt, add_special_tokens=False)["input_ids"]], device=DEVICE)
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

    torch.manual_seed(row_seed(SEED, prompt))
    out = adapter.network.generate(ids, max_new_tokens=24, max_denoising_steps=3,
                                   sampler_config=EntropyBoundSamplerConfig(entropy_bound=0.1))
    expected = out.sequences[0, ids.shape[1]:].tolist()[:24]
    assert alone.token_ids == expected[:len(alone.token_ids)] and len(alone.token_ids) >= 1
