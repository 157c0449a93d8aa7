"""Where the published LLaDA2 modeling code is, for the tests that compare with it: a checkout holding
``modeling_llada2_moe.py`` (``LLADA2_REFERENCE_DIR``) and a Python that can import it (``LLADA2_REFERENCE_PYTHON``,
torch and transformers 4.52.3). Absent, the test skips with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def llada2_reference(what: str) -> tuple[Path, str]:
    checkout, python = os.environ.get("LLADA2_REFERENCE_DIR"), os.environ.get("LLADA2_REFERENCE_PYTHON")
    if not checkout or not python:
        pytest.skip("set LLADA2_REFERENCE_DIR (a folder with modeling_llada2_moe.py) and LLADA2_REFERENCE_PYTHON "
                    f"(a Python with torch and transformers 4.52.3) to compare with the published {what}")
    if not (Path(checkout) / "modeling_llada2_moe.py").is_file():
        pytest.skip("LLADA2_REFERENCE_DIR has no modeling_llada2_moe.py")
    return Path(checkout), python
