"""Failures that used to be tracebacks: a damaged store shard, lm-eval's default CUDA device on a CPU machine."""

from __future__ import annotations

import pytest
import torch

from harness.errors import RunError
from harness.run.store import SampleStore
from run_folders import stored


def test_non_utf8_shard_names_the_file_and_line(tmp_path):
    store = SampleStore(tmp_path / "s", shard="rank0")
    store.append([stored("a")])
    with store.shard_path.open("ab") as handle:
        handle.write(b'{"key": "b", "v": "\xff\xfe"}\n')
    with pytest.raises(RunError) as error:
        store.load()
    message = str(error.value)
    assert str(store.shard_path) in message and "line 2" in message and "delete" in message
    assert "\n" not in message


def test_torn_non_utf8_tail_is_a_torn_line(tmp_path):
    store = SampleStore(tmp_path / "s", shard="rank0")
    store.append([stored("a")])
    with store.shard_path.open("ab") as handle:
        handle.write('{"key": "b", "v": "é'.encode()[:-1])  # killed inside a two-byte character
    assert set(store.load()) == {"a"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback on a machine without CUDA")
def test_lm_eval_default_cuda_device_falls_back_to_cpu(caplog):
    pytest.importorskip("lm_eval")
    from harness.lmeval.model import lm_eval_device

    with caplog.at_level("WARNING"):
        assert lm_eval_device("cuda:0") == torch.device("cpu")
    assert "CUDA is not available" in caplog.text
    assert lm_eval_device(None) == torch.device("cpu")
    with pytest.raises(RunError):
        lm_eval_device("gpu")
