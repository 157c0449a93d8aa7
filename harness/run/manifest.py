"""The run manifest: everything needed to know whether two runs can be compared, and to reproduce one."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


# Parts of a per-(model, task) manifest that change scores; the comparison tools warn when these differ. ``adapter``
# is a merged LoRA's file hash (absent without one).
SCORING_FIELDS = ("task_version", "data_sha256", "prompt_sha256", "canvas_tokens", "decoding", "model_ref", "adapter")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name (Linux's cpuinfo "model name"), else what platform knows (often just x86_64)."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("model name", "Hardware", "Processor") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def hardware(device: "torch.device") -> dict[str, Any]:
    """What speed depends on: the CPU model always, and the accelerator's name (None on a CPU run)."""
    import torch

    accelerator = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"cpu_model": cpu_model(), "accelerator": accelerator}


def environment(device: "torch.device") -> dict[str, Any]:
    import torch

    if device.type == "cuda":
        device_name, device_count = torch.cuda.get_device_name(device), torch.cuda.device_count()
    else:
        device_name, device_count = platform.processor() or platform.machine(), 1
    return {
        "harness_version": _version("dllm-harness"),
        "git_commit": git_commit(Path(__file__).resolve().parent),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "lm_eval": _version("lm-eval"),
        "platform": platform.platform(),
        "device": str(device),
        "device_name": device_name,
        "device_count": device_count,
        "torch_threads": torch.get_num_threads(),  # CPU threads of the run (--threads): speed depends on them
        **hardware(device),
    }
