"""The ReFusion decoder against the published one (ML-GSAI/ReFusion ``generate.py``), token for token and forward for
forward, on both of the project's networks.

The published code imports transformers 4.x modules that this environment's transformers no longer has, so it runs
in its own environment through benchmarks/reference/refusion_worker.py, on its own network class loaded from the same
tiny checkpoint. Set REFUSION_REFERENCE_DIR to a checkout of it and REFUSION_REFERENCE_PYTHON to a Python that
imports it (torch 2.13.0 and transformers 4.52.4, as docs/benchmarks.md shows); without them these tests skip.
The cases have no end-of-sequence (the two reference defects the project fixes are both about one, docs/decoders.md
§1.4), and cover every path: slots accepted whole, in-slot completion (at canvas 1024 also the native network's
grouped attention), and the token-by-token worst case.
"""

from __future__ import annotations

import os

import pytest
import torch

from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row
from models.networks.loading import load_network
from models.tiny import materialize
from benchmarks.common.regimes import NO_EOS, biased, make_prompts
from benchmarks.reference.refusion_published import PublishedUnavailable, PublishedWorker

PROMPTS = 3
CASES = [
    (64, "all", {}),
    (64, "90%", {}),
    (256, "90%", {}),
    (1024, "90%", {}),  # long enough for the native network to attend group by group (grouped_attention)
    (32, "random", {}),
    (96, "90%", {"slot_size": 4, "serial_num_blocks": 3}),
    (64, "90%", {"slot_threshold": 0.5, "token_threshold": 0.7}),
]


@pytest.fixture(scope="module")
def published():
    checkout, python = os.environ.get("REFUSION_REFERENCE_DIR"), os.environ.get("REFUSION_REFERENCE_PYTHON")
    if not checkout or not python:
        pytest.skip("set REFUSION_REFERENCE_DIR (a checkout of ML-GSAI/ReFusion) and REFUSION_REFERENCE_PYTHON "
                    "(a Python that imports it) to compare with the published decoder")
    try:
        worker = PublishedWorker(python, checkout, materialize("tiny-refusion"), prompts=PROMPTS)
    except PublishedUnavailable as error:
        pytest.fail(f"the published decoder did not start: {error}")
    yield worker
    worker.close()


@pytest.fixture(scope="module")
def networks():
    from transformers import Qwen3ForCausalLM

    folder = materialize("tiny-refusion")
    hf = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return {"native": load_network(folder, "qwen3", dtype=torch.float32), "transformers": hf}, hf.config


@pytest.mark.parametrize("network", ["native", "transformers"])
@pytest.mark.parametrize("canvas,regime,options", CASES, ids=[f"{c}-{r}-{len(o)}" for c, r, o in CASES])
def test_tokens_and_forwards_equal_the_published_decoders(published, networks, network, canvas, regime, options):
    nets, config = networks
    model = biased(nets[network], regime, 4096, config.vocab_size, config.mask_token_id)
    cfg = RefusionConfig(gen_length=canvas, mask_id=config.mask_token_id, eos_id=NO_EOS, **options)
    traces = [refusion_decode_row(model, p[None], cfg) for p in make_prompts(PROMPTS)]
    answer = published.decode(canvas, regime, **options)
    assert [t.token_ids for t in traces] == answer.tokens
    assert [t.nfe for t in traces] == answer.forwards
    if regime == "random":  # the worst case really ran: one slot per round, completed token by token
        assert min(answer.forwards) > 2 * canvas // cfg.slot_size
