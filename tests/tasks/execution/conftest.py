"""What the sandbox tests ask of the machine, checked independently of the sandbox's own probe where possible."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tasks.execution import probe_isolation


def _unshare_works(*flags: str) -> bool:
    """Independent check, with util-linux rather than our code, that the kernel allows namespaces."""
    exe = shutil.which("unshare")
    if exe is None or not sys.platform.startswith("linux"):
        return False
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    done = subprocess.run([exe, *user, *flags, "true"], capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.fixture(scope="module")
def isolation():
    return probe_isolation()


@pytest.fixture(scope="module")
def namespaces() -> bool:
    return _unshare_works("--net", "--mount", "--pid", "--fork")


@pytest.fixture(scope="module")
def contained(namespaces) -> bool:
    """Whether this machine lets the sandbox contain filesystem, process and environment attacks."""
    return namespaces or os.geteuid() == 0


@pytest.fixture(scope="module")
def user_namespaces() -> bool:
    """Whether an unprivileged user namespace (the non-root path) can be built here, even when running as root."""
    return _unshare_works("--user", "--map-root-user", "--net", "--mount", "--pid", "--fork")
