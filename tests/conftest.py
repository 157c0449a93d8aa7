"""Shared test setup: offline, one CPU thread (a served engine's too), and tiny models cached in one folder per test
session.

The tests run tiny models whose ops gain nothing from more threads, and the machine may be shared: torch's default
(a thread per core) made the quick set take 3x the CPU time and 10x the wall time under load. The variables are set
before torch is imported, so subprocesses (sandbox, ranks, benchmarks) inherit them; DLLM_TEST_THREADS overrides.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TEST_THREADS = os.environ.get("DLLM_TEST_THREADS", "1")
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, TEST_THREADS)
# A vLLM CPU server (the engine tests) otherwise binds a spinning OpenMP thread to every core, which starves the tests
# running beside it (-n): unbound, it runs the one thread above.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402  (after the thread variables, which torch reads when it loads)

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real evaluation splits beside the project; tests that need them skip when they are absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA
