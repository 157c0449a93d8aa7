"""The ReFusion adapter's network switch: the native Qwen3 network (default) and transformers' give the same tokens
on the tiny checkpoint, batched or not; bad values are one-line config errors."""

from __future__ import annotations

import pytest
import torch

from models.base import GenerationRequest, Message
from models.decoders.contract import ConfigError
from models.options import record
from models.registry import load_adapter, spec_for

CPU = torch.device("cpu")
REQUESTS = [GenerationRequest(messages=(Message("user", q),), canvas_tokens=32)
            for q in ("What is 2 + 2?", "Name three fruits that are not apples, and say why.", "Hi")]


def test_native_and_transformers_networks_give_the_same_tokens():
    adapter = load_adapter(spec_for("tiny-refusion"), CPU, torch.float32)
    options = {"slot_size": 4, "serial_num_blocks": 2, "slot_threshold": 0.3, "token_threshold": 0.3}
    native = adapter.generate(REQUESTS, adapter.make_config(options))
    theirs = adapter.generate(REQUESTS, adapter.make_config({**options, "network": "transformers"}))
    assert [g.token_ids for g in native] == [g.token_ids for g in theirs]
    config = adapter.make_config({})
    assert config.runtime.network == "native" and not config.runtime.compile
    # both stay in the sample key: another implementation of the same weights may flip a near-tie
    assert {"network": "native", "compile": False}.items() <= record(config).items()


@pytest.mark.parametrize("options, needle", [
    ({"network": "vllm"}, "network=vllm is not one of native, transformers"),
    ({"network": "transformers", "compile": True}, "compile=true needs"),
])
def test_bad_network_options_are_one_line(options, needle):
    adapter = load_adapter(spec_for("tiny-refusion"), CPU, torch.float32)
    with pytest.raises(ConfigError, match=needle) as err:
        adapter.make_config(options)
    assert "\n" not in str(err.value)
