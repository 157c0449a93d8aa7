"""Time spent inside the network's forward calls during one decode, so speed can be split into forwards per token,
time per forward and time outside forwards (the decoder's own work: sampling, bookkeeping, cache edits).

Hooks sit on the top-level network, so one hook pair is one network call, the unit ``nfe`` counts; an adapter whose
decoder calls submodules instead (DiffusionGemma's encoder and decoder) names those (``forward_modules``), and they
never nest. On CUDA each call is bracketed by events (no extra synchronisation: the decode's timing is left as it
is) and read after the caller's final synchronise; on CPU the wall clock is read directly.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch


class ForwardTimer:
    """Context manager: ``seconds()`` and ``calls`` after exit. Read ``seconds()`` only once the device is idle."""

    def __init__(self, network: torch.nn.Module | Sequence[torch.nn.Module], device: torch.device):
        self.network = network
        self.modules = (network,) if isinstance(network, torch.nn.Module) else tuple(network)
        self.cuda = device.type == "cuda"
        self.calls = 0
        self._cpu_seconds = 0.0
        self._taken_seconds = 0.0
        self._taken_events = 0
        self._started = 0.0
        self._events: list[tuple[Any, Any]] = []
        self._handles: list[Any] = []

    def _before(self, module: torch.nn.Module, args: Any) -> None:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self._events.append((start, None))
        else:
            self._started = time.perf_counter()

    def _after(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.calls += 1
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events[-1] = (self._events[-1][0], end)
        else:
            self._cpu_seconds += time.perf_counter() - self._started

    def __enter__(self) -> "ForwardTimer":
        self._handles = [handle for module in self.modules
                         for handle in (module.register_forward_pre_hook(self._before),
                                        module.register_forward_hook(self._after))]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def seconds(self) -> float:
        if not self.cuda:
            return self._cpu_seconds
        return sum(start.elapsed_time(end) for start, end in self._events if end is not None) / 1000.0

    def take(self) -> float:
        """Seconds inside forwards since the last ``take`` (rows in flight split each step's among its rows), read
        once the device is idle; each call reads only the forwards since the last."""
        if not self.cuda:
            taken, self._taken_seconds = self._cpu_seconds - self._taken_seconds, self._cpu_seconds
            return taken
        new = self._events[self._taken_events:]
        self._taken_events = len(self._events)
        return sum(start.elapsed_time(end) for start, end in new if end is not None) / 1000.0


def timed_network(adapter: Any, config: Any) -> torch.nn.Module | tuple[torch.nn.Module, ...] | None:
    """The network ``config`` decodes on, when the adapter runs one in this process (an engine-served model has
    none); an adapter with runtime options (ReFusion's native or transformers network) picks it by them. An adapter
    whose network's calls are submodule calls gives those modules (``forward_modules``); they never nest."""
    if not hasattr(type(adapter), "network"):
        return None
    network = adapter.network_for(config.runtime)
    return adapter.forward_modules(network) if isinstance(network, torch.nn.Module) else None
