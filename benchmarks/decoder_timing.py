"""Timing decoder rows side by side for the ``decoders`` and ``ar_baseline`` benchmarks: the rows, one interleaved
measurement per network and canvas (each network call synchronised, ``common.timing.synchronised``, so time outside
the network is the decoder's own), and its table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from benchmarks.common.table import Table, columns
from benchmarks.common.timing import round_order, synchronised
from harness.timing.clock import timed


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
    decodes every prompt once (in ``round_order``), so load that comes and goes falls on all rows alike."""
    timers = [synchronised(network, device) for _ in rows]
    for row, timer in zip(rows, timers):
        row.decode(timer, prompts[0], canvas)  # warm-up, not counted
    runs: list[list[tuple[int, int, float, float]]] = [[] for _ in rows]
    for round_ in range(rounds):
        for row, timer, run in round_order(list(zip(rows, timers, runs)), round_):
            timer.seconds, timer.calls = 0.0, 0
            tokens, seconds = 0, 0.0
            for prompt in prompts:
                generated, elapsed = timed(device, lambda: row.decode(timer, prompt, canvas))
                tokens, seconds = tokens + generated, seconds + elapsed
            run.append((tokens, timer.calls, seconds, timer.seconds))
    return [Measurement(name, canvas, row.name, run[-1][0], run[-1][1], tuple(r[2] for r in run),
                        tuple(r[3] for r in run)) for row, run in zip(rows, runs)]


def print_table(results: list[Measurement], rows: list[DecoderRow]) -> None:
    table = Table(columns(("network", -10), ("canvas", 6), ("decoder", -18), ("tok/s", 9), ("fwd/tok", 8),
                          ("ms/tok", 8), ("[min-max]", 13), ("outside", 8), ("tok/s vs " + rows[-1].name, 20)))
    table.print_header()
    baseline = {(m.network, m.canvas): m for m in results if m.decoder == rows[-1].name}
    for m in results:  # LLaDA / Dream rows compare with the AR baseline on the random network at the same canvas
        baseline.setdefault((m.network, m.canvas), baseline.get(("random", m.canvas), m))
    for m in results:
        ratio = m.tokens_per_second / baseline[(m.network, m.canvas)].tokens_per_second
        table.print_row(m.network, m.canvas, m.decoder, f"{m.tokens_per_second:.1f}", f"{m.forwards_per_token:.3f}",
                        f"{m.ms_per_token:.3f}", m.ms_range, f"{m.outside_share:.1%}", f"{ratio:.2f}x")
