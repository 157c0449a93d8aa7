"""Fixtures for the report tests: the synthetic run-folder builder (tests/common) and the headless Chromium driver."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import run_folders

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def rf() -> ModuleType:
    return run_folders


@pytest.fixture(scope="session")
def chromium_page() -> ModuleType:
    """The driver beside this file (the suite runs in importlib mode, so test folders are not on the import path)."""
    if "chromium_page" not in sys.modules:
        spec = importlib.util.spec_from_file_location("chromium_page", HERE / "chromium_page.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["chromium_page"] = module
        spec.loader.exec_module(module)
    return sys.modules["chromium_page"]


@pytest.fixture
def browser(chromium_page) -> str:
    """The Chromium binary; the test is skipped where none is installed."""
    binary = chromium_page.find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (install with: apt-get install -y chromium)")
    return binary


# Two runs of the same three tiny models whose folders differ only in the settings hash, every accuracy zero and the
# two diffusion models' speeds close together: the report a new user gets from comparing two tiny runs.
CROWDED_SPEEDS = {"tiny-qwen3": (180.0, "ar", 20.0), "tiny-llada": (20.0, "llada", 30.0),
                  "tiny-refusion": (11.0, "refusion", 8.0)}
CROWDED_FOLDER = "tiny-llada+tiny-qwen3+tiny-refusion__gsm8k+mbpp__{}"


@pytest.fixture
def crowded_runs(tmp_path, rf) -> list[Path]:
    runs = []
    for digest, shift in (("1a2b3c4d", 0.0), ("9f8e7d6c", 3.0)):
        entries = [rf.Entry(model, task, rf.samples([0.0] * 4, nfe=nfe), kind=kind, tps_override=tps + shift)
                   for task in ("gsm8k", "mbpp") for model, (tps, kind, nfe) in CROWDED_SPEEDS.items()]
        runs.append(rf.write_run(tmp_path / "runs" / CROWDED_FOLDER.format(digest), entries))
    return runs
