"""Fixtures for the report tests: the synthetic run-folder builder and the headless Chromium driver."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def load_helper(name: str) -> ModuleType:
    """Import a helper module beside this file (the suite runs in importlib mode, so test folders are not on the
    import path)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def rf() -> ModuleType:
    return load_helper("run_folders")


@pytest.fixture(scope="session")
def chromium_page() -> ModuleType:
    return load_helper("chromium_page")
