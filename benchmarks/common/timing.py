"""One way to time contenders side by side: interleaved rounds (the order flipped every other round, so load that
comes and goes falls on every contender alike), the device synchronised around each call, medians with their
min-max spread; plus the network wrapper that times the calls inside a decode, and the torch settings a run starts
with (one thread on the CPU: on a small or shared machine more threads only wait for each other)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import torch

from harness.timing.clock import timed

T = TypeVar("T")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_settings(device: str | torch.device, dtype: str | None = None, threads: int = 1) -> tuple[torch.device,
                                                                                                       torch.dtype]:
    """The device, its dtype (default: bfloat16 on CUDA, else float32) and ``threads`` torch threads on the CPU."""
    device = torch.device(device)
    torch.set_num_threads(threads)
    return device, DTYPES[dtype or ("bfloat16" if device.type == "cuda" else "float32")]


def round_order(items: Sequence[T], round_: int) -> list[T]:
    """The contenders in a round's order: as given on even rounds, reversed on odd ones."""
    return list(items) if round_ % 2 == 0 else list(items)[::-1]


def interleaved(calls: dict[str, Callable[[], T]], rounds: int, device: torch.device,
                warm_up: bool = True) -> dict[str, list[tuple[T, float]]]:
    """Each call once per round in ``round_order``, after one untimed call each: per name, (result, seconds) by
    round."""
    if warm_up:
        for call in calls.values():
            call()
    out: dict[str, list[tuple[T, float]]] = {name: [] for name in calls}
    for round_ in range(rounds):
        for name in round_order(list(calls), round_):
            out[name].append(timed(device, calls[name]))
    return out


@dataclass(frozen=True)
class Spread:
    """A median with the min and max it came from."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        return cls(statistics.median(values), min(values), max(values))

    def scaled(self, factor: float) -> "Spread":
        return Spread(self.median * factor, self.low * factor, self.high * factor)

    def words(self, digits: int = 2, sign: str = "", unit: str = "") -> str:
        """``median 1.33, min 1.31, max 1.42``."""
        return (f"median {self.median:{sign}.{digits}f}{unit}, min {self.low:{sign}.{digits}f}{unit}, "
                f"max {self.high:{sign}.{digits}f}{unit}")

    def cell(self, digits: int = 3, width: int = 9, range_digits: int | None = None) -> str:
        """``   0.193 [0.192-0.196]``."""
        inner = range_digits if range_digits is not None else digits
        return f"{self.median:{width}.{digits}f} [{self.low:.{inner}f}-{self.high:.{inner}f}]"

    def bracket(self, digits: int = 1) -> str:
        """``[0.1-0.2]``."""
        return f"[{self.low:.{digits}f}-{self.high:.{digits}f}]"


def seconds_cell(times: Sequence[float]) -> str:
    """Seconds as ``   0.193s [0.192-0.196]``."""
    s = Spread.of(times)
    return f"{s.median:8.3f}s [{s.low:.3f}-{s.high:.3f}]"


class SynchronisedTimer(torch.nn.Module):
    """Wraps a network: counts its calls and accumulates the time spent inside them. Unlike the harness's
    ``ForwardTimer`` (events, no extra synchronisation) it synchronises the device around every call, so the time
    outside the network is the decoder's own, not queued device work."""

    def __init__(self, inner: torch.nn.Module, device: torch.device):
        super().__init__()
        self.inner, self.device, self.config = inner, device, inner.config
        self.seconds, self.calls = 0.0, 0
        if hasattr(inner, "new_cache"):  # LLaDA's and Dream's Fast-dLLM caches (the HF Qwen3 of the ReFusion rows has
            self.new_cache = inner.new_cache  # none, which ReFusion reads as the transformers path)

    def _timed(self, call: Callable[[], object]) -> object:
        out, seconds = timed(self.device, call)
        self.seconds += seconds
        self.calls += 1
        return out

    def forward(self, *args, **kwargs):
        return self._timed(lambda: self.inner(*args, **kwargs))


class SynchronisedBlockTimer(SynchronisedTimer):
    """The same for a network with the block and causal forwards (the calls of the block-diffusion and AR decoders;
    kept apart, since ReFusion reads ``new_cache`` as the sign of a native network)."""

    def block_forward(self, *args, **kwargs):
        return self._timed(lambda: self.inner.block_forward(*args, **kwargs))

    def causal_forward(self, *args, **kwargs):
        return self._timed(lambda: self.inner.causal_forward(*args, **kwargs))


def synchronised(network: torch.nn.Module, device: torch.device) -> SynchronisedTimer:
    """The right synchronised wrapper for ``network``."""
    kind = SynchronisedBlockTimer if hasattr(network, "block_forward") else SynchronisedTimer
    return kind(network, device)
