"""Rows in flight against static batches for every decoder: tokens/s, per-request latency and what a round costs a
GPU beyond the network, at 1, 8 and 32 rows.

The same requests (GSM8K test questions through the harness's prompt and each tiny checkpoint's chat template) decode
two ways in interleaved rounds (the order flipped every other round, one torch thread on the CPU):
  * ``static``: batches of N held until their last row finishes (each decoder's ``generate`` per batch), a
    request's latency the whole batch's time;
  * ``continuous``: at most N rows in flight, a waiting request taking the row of the first to finish (the decoders'
    ``stream``), a request's latency from its admission to its last token.
Each rows value N decodes 2N requests (``--prompts`` fixes the number instead). Answers must end at different lengths
for rows in flight to matter, and a random network ends none: for the decoders that stop at an end of sequence the
network is wrapped (``EndsAt``) so that every position from a stop (the shortest prompt's length + half the canvas)
on prefers the end-of-sequence id; an answer then ends where its prompt's length puts it (stop - prompt length), so
lengths vary as GSM8K prompts do. Plain LLaDA
and Dream and Fast-dLLM v1 fill their whole canvas whatever it holds. Both schedules give every request the same
tokens (checked). ``outside`` is the share of a schedule's wall time spent outside the network's calls.

Then each stream is counted once more at every N (``harness/timing/op_count.py``, exact counts, the same on any
machine): aten ops and host reads outside the network's calls per call, and bytes written by copy-like ops outside
the calls per request. Targets (PASS/FAIL lines):
  * continuous / static tokens/s >= 1.0 at the largest N for every decoder that stops at an end of sequence
    (>= 0.95 for the canvas fillers, whose rows all take the same forwards: rows in flight can only keep pace);
  * at the largest N against 1 row: ops per call <= 2x, host reads per call <= 2, bytes copied per request <= 2x.

    python -m benchmarks rows_in_flight [--data-dir DATA] [--rows 1 8 32] [--canvas 64] [--rounds 3]
                                        [--decoders sdar llada ...] [--device cuda --dtype bfloat16] [--no-counts]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from benchmarks.common.counts import Counted
from benchmarks.common.fastdllm_modes import mode_config
from benchmarks.common.networks import EndsAt
from benchmarks.common.table import Table, columns
from benchmarks.common.timing import DTYPES, Spread, round_order
from benchmarks.common.verdict import Report
from harness.run.runner import to_request
from harness.timing.clock import synchronize
from harness.timing.forward_timer import ForwardTimer
from harness.timing.op_count import OpCounter
from models.adapters.native import NetworkCalls
from models.decoders.ar import ARConfig, ar_generate, ar_stream
from models.decoders.block_diffusion import BlockDiffusionConfig, block_diffusion_generate, block_diffusion_stream
from models.decoders.dream import DreamConfig, dream_generate, dream_stream
from models.decoders.fastdllm.dream_sampler import fastdllm_dream_generate, fastdllm_dream_stream
from models.decoders.fastdllm.llada_sampler import fastdllm_llada_generate, fastdllm_llada_stream
from models.decoders.llada import LLaDAConfig, llada_generate, llada_stream
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_rows, refusion_stream
from models.families.fastdllm_v2 import FASTDLLM_V2
from models.families.llada2 import LLADA2, LLADA21
from models.families.sdar import SDAR
from models.options import set_options
from models.registry import load_adapter, spec_for
from tasks.registry import make_task

__all__ = ["CONTENDERS", "EndsAt", "count_failures", "count_flight"]  # what the count tests import


Ids = dict[str, Any]  # the checkpoint's token ids as its decoder config spells them (``adapter.token_ids()``)


@dataclass(frozen=True)
class Contender:
    """A decoder as this benchmark runs it: its tiny checkpoint and native network, its config at a canvas and token
    ids, its two schedules, whether its answers end at an end of sequence (the network then wrapped in ``EndsAt``)
    and whether it calls the network by method (``causal_forward``, ``block_forward``: routed through module calls,
    ``NetworkCalls``, for the counter and the forward timer to see them)."""

    checkpoint: str
    network: Callable[[Any], torch.nn.Module]  # the adapter's native network
    config: Callable[[int, Ids], Any]
    static: Callable[..., tuple[list[list[int]], list[float]]]
    stream: Callable[..., Any]
    stops: bool = True
    methods: bool = False


def gsm8k_prompts(n: int, data_dir: Path | None, adapter) -> list[torch.Tensor]:
    """The first ``n`` GSM8K test questions (the local split when given, else the bundled fixtures, repeated) as the
    checkpoint's chat-templated prompt ids."""
    task = make_task("gsm8k")
    docs = task.docs(task.load("fixtures" if data_dir is None else "auto", data_dir).records)
    config = adapter.make_config()
    texts = [adapter.render(to_request(task.prompt(docs[i % len(docs)]), 0), config) for i in range(n)]
    return [torch.tensor(adapter.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]


def static_batches(generate: Callable) -> Callable[..., tuple[list[list[int]], list[float]]]:
    """Static batches for a decoder with the ``generate(network, ids, mask, cfg)`` contract: left-padded chunks of
    ``rows`` prompts."""
    def run(network, prompts, cfg, rows) -> tuple[list[list[int]], list[float]]:
        tokens, latencies = [], []
        for start in range(0, len(prompts), rows):
            chunk = prompts[start:start + rows]
            width = max(len(p) for p in chunk)
            ids = torch.stack([torch.cat([p.new_zeros(width - len(p)), p]) for p in chunk])
            mask = torch.stack([torch.cat([p.new_zeros(width - len(p)), torch.ones_like(p)]) for p in chunk])
            began = time.perf_counter()
            with torch.inference_mode():
                tokens += [r.token_ids for r in generate(network, ids, mask, cfg).rows]
            latencies += [time.perf_counter() - began] * len(chunk)
        return tokens, latencies
    return run


def static_refusion(network, prompts, cfg, rows) -> tuple[list[list[int]], list[float]]:
    tokens, latencies = [], []
    for start in range(0, len(prompts), rows):
        began = time.perf_counter()
        with torch.inference_mode():
            tokens += [t.token_ids for t in refusion_decode_rows(network, prompts[start:start + rows], cfg)]
        latencies += [time.perf_counter() - began] * len(prompts[start:start + rows])
    return tokens, latencies


def continuous(stream: Callable, network, prompts, cfg, rows) -> tuple[list[list[int]], list[float]]:
    tokens: dict[int, list[int]] = {}
    joined: dict[int, float] = {}
    latencies: dict[int, float] = {}
    device = prompts[0].device
    with torch.inference_mode():
        step_start = time.perf_counter()
        for step in stream(network, prompts, cfg, rows):
            synchronize(device)
            now = time.perf_counter()
            joined.update({i: step_start for i in step.admitted})
            for i, result in step.finished:
                tokens[i], latencies[i] = result.token_ids, now - joined[i]
            step_start = now
    return [tokens[i] for i in range(len(prompts))], [latencies[i] for i in range(len(prompts))]


def block(preset: dict[str, Any], **overrides: Any) -> Callable[[int, Ids], BlockDiffusionConfig]:
    """A block-diffusion config from a family's registry preset (the options it sets), as its tiny checkpoint runs."""
    options = {k: v for k, v in preset.items() if k != "enable_thinking"} | overrides
    return lambda canvas, ids: set_options(BlockDiffusionConfig(), {**options, "gen_length": canvas, **ids},
                                           "block diffusion", True)


def fastdllm(kind: str, cache: str) -> Callable[[int, Ids], Any]:
    """Fast-dLLM v1 in a cache mode with the registry's threshold (0.9, blocks of 32): none, prefix or dual."""
    mode = {"none": "parallel", "prefix": "prefix+parallel", "dual": "dual+parallel"}[cache]
    return lambda canvas, ids: mode_config(kind, mode, canvas, 32, **ids)


def native(adapter) -> torch.nn.Module:
    return adapter.native_network


def network(adapter) -> torch.nn.Module:
    return adapter.network


TARGET, KEEPS_PACE = 1.0, 0.95
OPS_GROWTH, READS_PER_CALL, BYTES_GROWTH = 2.0, 2.0, 2.0
CONTENDERS = {
    "ar": Contender("tiny-qwen3", native, lambda canvas, ids: ARConfig(max_new_tokens=canvas, **ids),
                    static_batches(ar_generate), ar_stream, methods=True),
    "refusion": Contender("tiny-refusion", native,
                          lambda canvas, ids: RefusionConfig(gen_length=canvas, slot_size=8,
                                                             serial_num_blocks=max(canvas // 32, 1), **ids),
                          static_refusion, refusion_stream),
    "sdar": Contender("tiny-sdar", network, block(SDAR), static_batches(block_diffusion_generate),
                      block_diffusion_stream, methods=True),
    "fastdllm-v2": Contender("tiny-fastdllm-v2", network, block(FASTDLLM_V2, confidence_threshold=0.9),
                             static_batches(block_diffusion_generate), block_diffusion_stream, methods=True),
    "llada2": Contender("tiny-llada2", network, block(LLADA2), static_batches(block_diffusion_generate),
                        block_diffusion_stream, methods=True),
    "llada2.1": Contender("tiny-llada2", network, block(LLADA21), static_batches(block_diffusion_generate),
                          block_diffusion_stream, methods=True),
    "llada": Contender("tiny-llada", network,
                       lambda canvas, ids: LLaDAConfig(gen_length=canvas, steps=canvas // 2, block_length=32, **ids),
                       static_batches(llada_generate), llada_stream, stops=False),
    "dream": Contender("tiny-dream", network,
                       lambda canvas, ids: DreamConfig(max_new_tokens=canvas, steps=canvas // 2, **ids),
                       static_batches(dream_generate), dream_stream, stops=False),
    **{f"fastdllm-llada-{cache}": Contender("tiny-llada-fastdllm", network, fastdllm("llada", cache),
                                            static_batches(fastdllm_llada_generate), fastdllm_llada_stream,
                                            stops=False) for cache in ("none", "prefix", "dual")},
    **{f"fastdllm-dream-{cache}": Contender("tiny-dream-fastdllm", network, fastdllm("dream", cache),
                                            static_batches(fastdllm_dream_generate), fastdllm_dream_stream,
                                            stops=False) for cache in ("none", "prefix", "dual")},
}


@dataclass(frozen=True)
class FlightCount(Counted):
    """One counted stream: ``requests`` prompts through at most ``rows`` rows in flight, what it did outside the
    network's calls, and each request's tokens (in prompt order)."""

    rows: int
    requests: int
    tokens: list[list[int]]

    @property
    def bytes_per_request(self) -> float:
        return self.counts.copied_bytes / self.requests


def calls_of(contender: Contender, network: torch.nn.Module) -> torch.nn.Module:
    """The network as the decoder is handed it, each of its calls one module call (what the counter and the
    forward timer hook)."""
    return NetworkCalls(network) if contender.methods else network


def count_flight(contender: Contender, network: torch.nn.Module, prompts: Sequence[torch.Tensor], cfg: Any,
                 rows: int) -> FlightCount:
    """The contender's stream over ``prompts`` with at most ``rows`` in flight, counted (dispatched ops, not time:
    the same on any machine)."""
    calls = calls_of(contender, network)
    tokens: dict[int, list[int]] = {}
    with torch.inference_mode(), OpCounter(calls) as counts:
        for step in contender.stream(calls, list(prompts), cfg, rows):
            tokens.update((i, list(result.token_ids)) for i, result in step.finished)
    return FlightCount(counts=counts, rows=rows, requests=len(prompts), tokens=[tokens[i] for i in range(len(prompts))])


def growth(at: float, base: float) -> float:
    """``at`` over ``base`` (nothing against nothing is no growth)."""
    return at / base if base else (1.0 if not at else float("inf"))


def count_failures(name: str, base: FlightCount, at: FlightCount) -> list[str]:
    """One line per count target ``at`` misses against ``base`` (the stream at 1 row); empty when all hold."""
    ops, copied = growth(at.ops_per_call, base.ops_per_call), growth(at.bytes_per_request, base.bytes_per_request)
    failures = []
    if ops > OPS_GROWTH:
        failures.append(f"{name}: {at.ops_per_call:.1f} ops outside the calls per call at {at.rows} rows, "
                        f"{ops:.2f}x {base.rows} row(s) (target <= {OPS_GROWTH}x): top {at.counts.ops.most_common(5)}")
    if at.reads_per_call > READS_PER_CALL:
        failures.append(f"{name}: {at.reads_per_call:.2f} host reads per call at {at.rows} rows (target <= "
                        f"{READS_PER_CALL}): {dict(at.counts.reads)}")
    if copied > BYTES_GROWTH:
        failures.append(f"{name}: {at.bytes_per_request:.0f} bytes copied per request at {at.rows} rows, {copied:.2f}x "
                        f"{base.rows} row(s) (target <= {BYTES_GROWTH}x): top {at.counts.copied.most_common(4)}")
    return failures


@dataclass(frozen=True)
class Timed:
    """One schedule at one rows value over the rounds: tokens/s per round, the last round's latencies and share of
    wall time outside the network's calls, and its tokens."""

    rates: list[float]
    latencies: list[float]
    outside: float
    tokens: list[list[int]]


def time_schedules(contender: Contender, network: torch.nn.Module, prompts: list[torch.Tensor], cfg: Any, rows: int,
                   rounds: int) -> dict[str, Timed]:
    """Static and continuous in interleaved rounds (the order flipped every other round)."""
    calls = calls_of(contender, network)
    device = prompts[0].device
    modes = {"static": lambda: contender.static(calls, prompts, cfg, rows),
             "continuous": lambda: continuous(contender.stream, calls, prompts, cfg, rows)}
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    last: dict[str, tuple[list[list[int]], list[float], float]] = {}
    for round_ in range(rounds):
        for mode in round_order(list(modes), round_):
            with ForwardTimer(calls, device) as timer:
                synchronize(device)
                began = time.perf_counter()
                tokens, latencies = modes[mode]()
                synchronize(device)
                seconds = time.perf_counter() - began
            rates[mode].append(sum(map(len, tokens)) / seconds)
            last[mode] = (tokens, latencies, 1 - timer.seconds() / seconds)
    return {mode: Timed(rates[mode], last[mode][1], last[mode][2], last[mode][0]) for mode in modes}


def print_timed(name: str, rows: int, timed: dict[str, Timed]) -> None:
    base = statistics.median(timed["static"].rates)
    for mode, t in timed.items():
        rates = Spread.of(t.rates)
        p90 = statistics.quantiles(t.latencies, n=10)[8] if len(t.latencies) > 1 else t.latencies[0]
        TABLE.print_row(name, rows, mode, f"{rates.median:.1f}", rates.bracket(1),
                        f"{statistics.median(t.latencies):.3f}", f"{p90:.3f}", f"{100 * t.outside:.1f}%",
                        f"{rates.median / base:.2f}x")


def print_counts(name: str, base: FlightCount, at: FlightCount) -> None:
    ops, copied = growth(at.ops_per_call, base.ops_per_call), growth(at.bytes_per_request, base.bytes_per_request)
    print(f"{name:<21} {at.rows:>4} counted     {at.counts.forwards:>6} calls  ops/call {at.ops_per_call:>7.1f} "
          f"({ops:.2f}x)  reads/call {at.reads_per_call:.2f}  copied/request {at.bytes_per_request:>10.0f} B "
          f"({copied:.2f}x)")


def run_contender(name: str, args: argparse.Namespace, report: Report) -> list[str]:
    """Time (and count) one decoder at every rows value; returns its FAIL lines."""
    contender = CONTENDERS[name]
    device = torch.device(args.device)
    adapter = load_adapter(spec_for(contender.checkpoint), device, DTYPES[args.dtype])
    sizes = {rows: args.prompts or 2 * rows for rows in args.rows}
    prompts = [p.to(device) for p in gsm8k_prompts(max(sizes.values()), args.data_dir, adapter)]
    lengths = sorted(len(p) for p in prompts)
    cfg = contender.config(args.canvas, adapter.token_ids())
    stop = lengths[0] + args.canvas // 2  # the shortest prompt's answer fills half the canvas, the longest's less
    net = contender.network(adapter)
    net = EndsAt(net, adapter.eos_ids()[0], stop) if contender.stops else net
    failures, counted = [], {}
    for rows, n in sizes.items():
        timed = time_schedules(contender, net, prompts[:n], cfg, rows, args.rounds)
        print_timed(name, rows, timed)
        if not args.no_counts:
            counted[rows] = count_flight(contender, net, prompts[:n], cfg, rows)
            print_counts(name, counted[min(counted)], counted[rows])
        same = timed["static"].tokens == timed["continuous"].tokens and \
            (rows not in counted or counted[rows].tokens == timed["continuous"].tokens)
        if rows == max(sizes):
            ratio = statistics.median(timed["continuous"].rates) / statistics.median(timed["static"].rates)
            answers = sorted(len(t) for t in timed["continuous"].tokens)
            target = TARGET if contender.stops else KEEPS_PACE
            line = (f"{name}: continuous / static tokens/s {ratio:.2f} at {rows} rows (target >= {target}), tokens "
                    f"{'identical' if same else 'DIFFER'}, prompts of {lengths[0]}-{lengths[-1]} tokens, answers of "
                    f"{answers[0]}-{answers[-1]}" + (f" (ending from position {stop})" if contender.stops else ""))
            if not report.check(f"{name}: continuous / static tokens/s at {rows} rows, tokens identical", ratio,
                                ">=", target, line, also=same):
                failures.append(line)
        elif not same:
            failures.append(f"{name}: tokens DIFFER between the schedules at {rows} rows")
            report.add(f"{name}: tokens identical between the schedules at {rows} rows", "identical", None, False,
                       f"FAIL {failures[-1]}")
    if len(counted) > 1:
        base, top = counted[min(counted)], counted[max(counted)]
        missed = count_failures(name, base, top)
        ops, copied = growth(top.ops_per_call, base.ops_per_call), growth(top.bytes_per_request, base.bytes_per_request)
        print("PASS" if not missed else "FAIL", f"{name} counts at {top.rows} rows against {base.rows}: ops per call "
              f"{ops:.2f}x (target <= {OPS_GROWTH}x), reads per call {top.reads_per_call:.2f} (target <= "
              f"{READS_PER_CALL}), bytes copied per request {copied:.2f}x (target <= {BYTES_GROWTH}x)")
        at = f"at {top.rows} rows against {base.rows}"
        report.check(f"{name}: ops per call {at}", ops, "<=", OPS_GROWTH)
        report.check(f"{name}: host reads per call at {top.rows} rows", top.reads_per_call, "<=", READS_PER_CALL)
        report.check(f"{name}: bytes copied per request {at}", copied, "<=", BYTES_GROWTH)
        for line in missed:
            print("   ", line)
        failures += missed
    return failures


TABLE = Table(columns(("decoder", -21), ("rows", 4), ("schedule", -11), ("tok/s", 8), ("[min-max]", 17), ("p50 s", 7),
                      ("p90 s", 7), ("outside", 8), ("ratio", 6)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None, help="a folder with gsm8k/test.jsonl (default: "
                                                                      "the bundled fixture items, repeated)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32], help="rows in flight (and static batch "
                                                                                 "size) to run, the targets read "
                                                                                 "the smallest and the largest")
    parser.add_argument("--prompts", type=int, default=None, help="requests at every rows value (default: 2 x rows)")
    parser.add_argument("--canvas", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decoders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES))
    parser.add_argument("--no-counts", action="store_true", help="time only (the counts are the same on any device)")


def run(args: argparse.Namespace, report: Report) -> None:
    args.rows = sorted(set(args.rows))
    if (args.prompts or 2) < 2:
        raise ValueError("--prompts must be at least 2 (a latency spread needs two requests)")
    torch.set_num_threads(1)
    print(f"GSM8K prompts ({'local split' if args.data_dir else 'fixture items, repeated'}), "
          f"{args.prompts or '2 x rows'} requests at {', '.join(map(str, args.rows))} rows, canvas {args.canvas}, "
          f"{args.device} {args.dtype}; medians [min-max] of {args.rounds} interleaved rounds, each decoder on its "
          f"tiny checkpoint's network, one thread")
    TABLE.print_header()
    failures = [line for name in args.decoders for line in run_contender(name, args, report)]
    print("PASS every target" if not failures else f"{len(failures)} target(s) missed")
