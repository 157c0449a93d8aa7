"""Fixtures for the gate tests: the synthetic run-folder builder shared with the report tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HELPER = Path(__file__).resolve().parents[1] / "reports" / "run_folders.py"


@pytest.fixture(scope="session")
def rf() -> ModuleType:
    if "run_folders" not in sys.modules:
        spec = importlib.util.spec_from_file_location("run_folders", HELPER)
        module = importlib.util.module_from_spec(spec)
        sys.modules["run_folders"] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
    return sys.modules["run_folders"]
