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
