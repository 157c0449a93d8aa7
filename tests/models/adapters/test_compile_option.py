"""``compile``, the runtime option of every native-network adapter: the tiny model of each family decodes a batch of
two to the tokens and forwards of eager with ``compile=true`` (graphs made by dynamo and run op by op, so a graph
break fails the decode); the option is typed, in the sample key, and unknown to adapters that run no native
network (the autoregressive one refuses it on transformers' network)."""

from __future__ import annotations

import pytest
import torch
from adapter_cases import CASES, REQUESTS
from torch._dynamo.testing import CompileCounterWithBackend

import models.networks.compiled as compiled
from models.adapters.native import NetworkCalls
from models.decoders.contract import ConfigError
from models.networks.compiled import CompiledNetwork
from models.options import record
from models.registry import load_adapter, spec_for

CPU = torch.device("cpu")
FAMILIES = ["tiny-llada", "tiny-llada-fastdllm", "tiny-dream", "tiny-dream-fastdllm", "tiny-sdar", "tiny-fastdllm-v2",
            "tiny-llada2", "tiny-refusion", "tiny-qwen3"]


@pytest.fixture
def graphs(monkeypatch):
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    monkeypatch.setattr(compiled, "BACKEND", counter)
    yield counter
    torch._dynamo.reset()


@pytest.mark.parametrize("name", FAMILIES)
def test_compiled_decode_gives_the_eager_tokens(name, graphs):
    adapter = load_adapter(spec_for(name), CPU, torch.float32)
    options = CASES.get(name, {})
    eager = adapter.generate(REQUESTS[:2], adapter.make_config(options))
    config = adapter.make_config({**options, "compile": "true"})
    network = adapter.network_for(config.runtime)
    assert network is adapter.network_for(config.runtime)  # what the forward timer hooks is what decodes
    assert isinstance(network.network if isinstance(network, NetworkCalls) else network, CompiledNetwork)
    compiled_rows = adapter.generate(REQUESTS[:2], config)
    assert [g.token_ids for g in compiled_rows] == [g.token_ids for g in eager]
    assert [g.nfe for g in compiled_rows] == [g.nfe for g in eager]
    assert 0 < graphs.frame_count <= 6  # a graph per call shape, not one per step


def test_compile_is_a_typed_option_in_the_sample_key():
    adapter = load_adapter(spec_for("tiny-sdar"), CPU, torch.float32)
    assert adapter.make_config().runtime.compile is False
    assert record(adapter.make_config({"compile": "true"}))["compile"] is True
    assert "compile" not in record(adapter.make_config())  # added after runs were stored: keyed only when set
    with pytest.raises(ConfigError, match="option compile=fast is not a bool") as error:
        adapter.make_config({"compile": "fast"})
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", ["tiny-diffusiongemma"])
def test_adapters_without_a_native_network_have_no_compile_option(name):
    adapter = load_adapter(spec_for(name), CPU, torch.float32)
    with pytest.raises(ConfigError, match="unknown option compile") as error:
        adapter.make_config({"compile": "true"})
    assert "\n" not in str(error.value)


def test_ar_compile_needs_the_native_network():
    adapter = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32)
    with pytest.raises(ConfigError, match="compile=true needs the native network") as error:
        adapter.make_config({"compile": "true", "network": "transformers"})
    assert "\n" not in str(error.value)
