"""The engine tests need a real vLLM server: its Python comes from $DLLM_VLLM_PYTHON (its own virtual environment).

Locally they skip with the reason when it is absent; CI sets DLLM_REQUIRE_ENGINE=1, so there they fail instead.
One server, launched through the adapter's own launcher, serves the whole test session (a cold start costs about a
minute); tests that need a private server start it themselves.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import torch

PYTHON_ENV = "DLLM_VLLM_PYTHON"


@pytest.fixture(scope="session")
def engine_python() -> str:
    python = os.environ.get(PYTHON_ENV)
    if python and Path(python).is_file():
        return python
    reason = (f"{PYTHON_ENV} is not set to a Python with vllm installed (see docs/usage.md: the engine baseline on CPU)"
              if not python else f"{PYTHON_ENV}={python} does not exist")
    if os.environ.get("DLLM_REQUIRE_ENGINE") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@contextmanager
def served(name: str, engine_python: str, folder: Path) -> Iterator:
    """The adapter of engine model ``name`` (fp32, greedy) with its server launched through the adapter's own
    launcher; the server is gone when the block ends."""
    from models.registry import load_adapter, spec_for

    adapter = load_adapter(spec_for(name), torch.device("cpu"), torch.float32)
    launch = adapter.make_config({"server_python": engine_python}).decoder
    with adapter.session(folder):
        server = adapter.server(launch)
        yield adapter
    assert server.process is not None and server.process.poll() is not None, "the session left the server running"


@pytest.fixture(scope="session")
def serve():
    """``served`` for a test module that starts a server of its own."""
    return served


@pytest.fixture(scope="session")
def engine(engine_python, tmp_path_factory):
    """tiny-qwen3-vllm, whose server every engine test shares."""
    with served("tiny-qwen3-vllm", engine_python, tmp_path_factory.mktemp("engine-session")) as adapter:
        yield adapter
