"""The forward timer sees exactly the network calls each decoder counts, and never more time than the decode took."""

import pytest
import torch

from harness.timing.forward_timer import ForwardTimer, timed_network
from harness.run.generation import generate_timed
from models.base import GenerationRequest, Message
from models.registry import load_adapter, spec_for

CPU = torch.device("cpu")
REQUESTS = [GenerationRequest(messages=(Message("user", q),), canvas_tokens=16)
            for q in ("What is 2 + 2?", "Name three fruits, please, in a longer question.")]


@pytest.mark.parametrize("name, options", [("tiny-qwen3", {}), ("tiny-llada", {"steps": 8}),
                                           ("tiny-refusion", {"slot_size": 4, "serial_num_blocks": 2})])
def test_hook_calls_equal_the_decoders_forward_count(name, options):
    adapter = load_adapter(spec_for(name), CPU, torch.float32)
    config = adapter.make_config(options)
    network = timed_network(adapter, config)
    assert network is not None
    with ForwardTimer(network, CPU) as timer:
        generations = adapter.generate(REQUESTS, config)
    assert timer.calls == pytest.approx(sum(g.nfe for g in generations))
    assert timer.calls > 0 and timer.seconds() > 0
    assert not network._forward_hooks and not network._forward_pre_hooks  # removed on exit

    prompts, generations, seconds, forward_s = generate_timed(adapter, config, REQUESTS)
    assert 0 < forward_s <= seconds
