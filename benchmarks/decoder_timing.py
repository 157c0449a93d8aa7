"""Timing decoder rows side by side for benchmarks/decoders.py and benchmarks/ar_baseline.py: a network wrapper that
synchronises the device around each call (so time outside the network is the decoder's own), the rows, one
interleaved measurement per network and canvas, and its table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from harness.timing.clock import timed


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


Decode = Callable[[torch.nn.Module, torch.Tensor, int], int]  # (network, prompt [1, P], canvas) -> tokens generated


@dataclass(frozen=True)
class DecoderRow:
    name: str
    decode: Decode


@dataclass(frozen=True)
class Measurement:
    """One decoder row over ``rounds`` interleaved rounds (every prompt once per round); figures are medians."""

    network: str
    canvas: int
    decoder: str
    tokens: int  # per round
    forwards: int  # per round
    seconds: tuple[float, ...]  # per round
    forward_seconds: tuple[float, ...]  # per round

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / statistics.median(self.seconds)

    @property
    def forwards_per_token(self) -> float:
        return self.forwards / self.tokens

    @property
    def outside_share(self) -> float:
        return statistics.median(max(0.0, 1.0 - f / s) for f, s in zip(self.forward_seconds, self.seconds))

    @property
    def ms_per_token(self) -> float:
        return 1000.0 * statistics.median(self.seconds) / self.tokens

    @property
    def ms_range(self) -> str:
        return f"{1000.0 * min(self.seconds) / self.tokens:.3f}-{1000.0 * max(self.seconds) / self.tokens:.3f}"


@torch.inference_mode()
def measure(name: str, network: torch.nn.Module, rows: list[DecoderRow], prompts: list[torch.Tensor], canvas: int,
            device: torch.device, rounds: int) -> list[Measurement]:
    """The rows on one network and canvas: one warm-up decode each, then ``rounds`` rounds in which every row
    decodes every prompt once, so load that comes and goes falls on all rows alike."""
    timer = SynchronisedBlockTimer if hasattr(network, "block_forward") else SynchronisedTimer
    timers = [timer(network, device) for _ in rows]
    for row, timer in zip(rows, timers):
        row.decode(timer, prompts[0], canvas)  # warm-up, not counted
    runs: list[list[tuple[int, int, float, float]]] = [[] for _ in rows]
    for _ in range(rounds):
        for row, timer, run in zip(rows, timers, runs):
            timer.seconds, timer.calls = 0.0, 0
            tokens, seconds = 0, 0.0
            for prompt in prompts:
                generated, elapsed = timed(device, lambda: row.decode(timer, prompt, canvas))
                tokens, seconds = tokens + generated, seconds + elapsed
            run.append((tokens, timer.calls, seconds, timer.seconds))
    return [Measurement(name, canvas, row.name, run[-1][0], run[-1][1], tuple(r[2] for r in run),
                        tuple(r[3] for r in run)) for row, run in zip(rows, runs)]


def print_table(results: list[Measurement], rows: list[DecoderRow]) -> None:
    print(f"{'network':<10} {'canvas':>6} {'decoder':<18} {'tok/s':>9} {'fwd/tok':>8} {'ms/tok':>8} {'[min-max]':>13}"
          f" {'outside':>8} {'tok/s vs ' + rows[-1].name:>20}")
    baseline = {(m.network, m.canvas): m for m in results if m.decoder == rows[-1].name}
    for m in results:  # LLaDA / Dream rows compare with the AR baseline on the random network at the same canvas
        baseline.setdefault((m.network, m.canvas), baseline.get(("random", m.canvas), m))
    for m in results:
        ratio = m.tokens_per_second / baseline[(m.network, m.canvas)].tokens_per_second
        print(f"{m.network:<10} {m.canvas:>6} {m.decoder:<18} {m.tokens_per_second:>9.1f} {m.forwards_per_token:>8.3f}"
              f" {m.ms_per_token:>8.3f} {m.ms_range:>13} {m.outside_share:>7.1%} {ratio:>19.2f}x")
