"""Where a run happened, as the JSON and the docs' provenance lines state it: the machine, its load, the torch
threads, the date and the library versions (a figure means little without them)."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's word for it."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine(device: str | None) -> str:
    """``AMD EPYC 7B13, 2 cores`` (with the GPU's name when the device is CUDA)."""
    words = f"{cpu_model()}, {os.cpu_count()} cores"
    if device and device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            words = f"{torch.cuda.get_device_name(torch.device(device))}; {words}"
    return words


def environment(device: str | None, quick: bool, seconds: float) -> dict[str, Any]:
    import torch
    import transformers

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"machine": machine(device), "load_average": load, "device": device or "as each benchmark defaults",
            "quick": quick, "date": datetime.date.today().isoformat(), "seconds": round(seconds, 1),
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "command": command(sys.argv[1:])}


def command(arguments: list[str]) -> str:
    """The run's command line as the docs quote it: where it wrote (``--json FILE``) is the caller's, not the run's."""
    kept, skip = [], False
    for argument in arguments:
        if skip or argument == "--json" or argument.startswith("--json="):
            skip = argument == "--json"
            continue
        kept.append(argument)
    return " ".join(["python -m benchmarks", *kept])
