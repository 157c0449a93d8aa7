"""Fixtures for the gate tests: the synthetic run-folder builder shared with the report tests (tests/common)."""

from __future__ import annotations

from types import ModuleType

import pytest
import run_folders


@pytest.fixture(scope="session")
def rf() -> ModuleType:
    return run_folders
