"""Sections 3 and 4 of the ``refusion`` benchmark: tokens/s by batch size, and where that time goes against what
batching one forward alone gains (the ceiling)."""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common.networks import refusion_checkpoint
from benchmarks.common.regimes import NO_EOS, make_prompts
from benchmarks.common.timing import Spread, round_order, seconds_cell
from harness.timing.clock import timed
from harness.timing.forward_timer import ForwardTimer
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_rows

CEILING_SHARE = 0.8  # section 3's batch-8 speed-up over section 4's one-forward-alone gain at batch 8
# Section 3's rounds per --rounds: its decodes take a fraction of a second, and three of them swung its batch-8
# ratio 0.53-0.71 between consecutive runs of the same code
BATCH_ROUNDS = 3


def batch_workload(args) -> tuple[torch.nn.Module, list[torch.Tensor], Callable[[int], None]]:
    """Section 3's workload: the 90% network, the prompts (as many as the largest batch), and a function decoding all
    of them with a number of rows in flight (each later prompt starts in the row of the first to finish). The
    prompts go longest first, the order in which a run batches them (harness.run.generation.length_order)."""
    native, _, mask_id = refusion_checkpoint("90%", 4096, args.device, args.dtype)
    cfg = RefusionConfig(gen_length=args.batch_canvas, slot_size=8, serial_num_blocks=2, mask_id=mask_id,
                         eos_id=NO_EOS)
    prompts = sorted(make_prompts(max(args.batches), args.device), key=len, reverse=True)

    def run(b: int) -> None:
        refusion_decode_rows(native, prompts, cfg, max_rows=b)

    return native, prompts, run


@dataclass(frozen=True)
class BatchTimes:
    """Section 3's medians by batch size: a round's wall time, the part inside the network's calls, and the network
    calls a round makes (the same every round: the decode is greedy)."""

    round_s: dict[int, float]
    network_s: dict[int, float]
    forwards: dict[int, int]

    def speedup(self, b: int) -> float:
        """Tokens/s at ``b`` rows over batch 1 (the same tokens at every batch size)."""
        return self.round_s[1] / self.round_s[b]

    def network_speedup(self, b: int) -> float:
        return self.network_s[1] / self.network_s[b]


def section_batch(args) -> BatchTimes | None:
    """Every batch size decodes the same prompts with that many rows in flight, so the rates compare one workload
    run at different batch sizes, in interleaved rounds (the order flipped every other round). The time inside the
    network's forwards is kept apart: its ratio between batch sizes is what batching the same forwards gains with no
    decoder around them. Returns the medians when batch sizes 1 and 8 both ran."""
    native, prompts, run = batch_workload(args)
    device = torch.device(args.device)
    times: dict[int, list[float]] = {b: [] for b in args.batches}
    inside: dict[int, list[float]] = {b: [] for b in args.batches}
    forwards: dict[int, int] = {}
    for b in args.batches:
        run(b)  # warm-up
    rounds = BATCH_ROUNDS * args.rounds
    for r in range(rounds):
        for b in round_order(args.batches, r):
            with ForwardTimer(native.inner, device) as timer:
                times[b].append(timed(device, lambda: run(b))[1])
            inside[b].append(timer.seconds())
            forwards[b] = timer.calls
    print(f"\n## 3. tokens/s by batch size ({len(prompts)} prompts longest first, canvas {args.batch_canvas}, 90% "
          f"acceptance, native network, that many rows in flight; medians of {rounds} interleaved rounds)")
    rate = {b: len(prompts) * args.batch_canvas / statistics.median(t) for b, t in times.items()}
    net = {b: statistics.median(t) for b, t in inside.items()}
    first = args.batches[0]
    for b, t in times.items():
        print(f"  batch {b:3d}: {rate[b]:9.1f} tokens/s  (round {seconds_cell(t)})  x{rate[b] / rate[first]:.2f}"
              f"   in network forwards {seconds_cell(inside[b])}  x{net[first] / net[b]:.2f}  ({forwards[b]} forwards)")
    if 8 not in rate or 1 not in rate:
        return None
    return BatchTimes({b: statistics.median(t) for b, t in times.items()}, net, forwards)


ATTENTION, MATMUL = ("scaled_dot_product",), ("aten::mm", "aten::addmm", "aten::bmm")


def op_ms(events, own: str, names: tuple[str, ...] | None = None) -> float:
    """The profiled ops' own time in ms: those whose name holds one of ``names``, or all of them."""
    return sum(getattr(e, own) for e in events if names is None or any(n in e.key for n in names)) / 1e3


def section_profile(args, batch: BatchTimes | None) -> float | None:
    """Section 3's workload under torch.profiler, interleaved rounds, medians: why batching pays (or not) here.
    Then ``forward_gain``'s ceiling, with section 3's batch-8 speed-up over batch 1 (when section 3 ran) as a
    fraction of it beside it, split by ``ceiling_factors``, and ``forward_breakdown``. Returns the gain at batch 8
    over batch 1 (None without both)."""
    native, prompts, run = batch_workload(args)
    fed = {"calls": 0, "tokens": 0}

    def count(_module, inputs, _kwargs) -> None:
        fed["calls"] += 1
        fed["tokens"] += inputs[0].numel()

    native.inner.register_forward_pre_hook(count, with_kwargs=True)
    activities, own = profiler_settings(args.device.startswith("cuda"))
    rows: dict[int, list[tuple[float, ...]]] = {b: [] for b in args.batches}
    for b in args.batches:
        run(b)  # warm-up
    for r in range(args.rounds):
        for b in round_order(args.batches, r):
            fed.update(calls=0, tokens=0)
            with profile(activities=activities) as prof:
                run(b)
            events = prof.key_averages()
            rows[b].append((fed["calls"], fed["tokens"], op_ms(events, own, ATTENTION), op_ms(events, own, MATMUL),
                            op_ms(events, own)))
    print(f"\n## 4. where section 3's time goes ({len(prompts)} prompts, canvas {args.batch_canvas}; torch.profiler "
          f"{own}, ms, medians of {args.rounds} rounds)")
    print(f"  {'batch':>5s} {'forwards':>8s} {'tokens fed':>10s} {'attention':>9s} {'per forward':>11s} {'matmul':>7s} "
          f"{'all ops':>7s}")
    for b, measured in rows.items():
        calls, tokens, attention, matmul, every = (statistics.median(c) for c in zip(*measured))  # calls: fixed
        print(f"  {b:5d} {calls:8.0f} {tokens:10.0f} {attention:9.1f} {attention / calls:11.2f} {matmul:7.1f} "
              f"{every:7.1f}")
    width = round(statistics.median(r[1] / r[0] for r in rows[args.batches[0]]))
    cached = round(statistics.mean(len(p) for p in prompts)) + args.batch_canvas // 2
    uniform = forward_gain(native.inner, width, cached, args)
    if 8 not in uniform or 1 not in uniform:
        return None
    ceiling = 8 * uniform[1] / uniform[8]
    if batch is None:
        print(f"  ceiling at batch 8: x{ceiling:.2f} (section 3 did not run: no fraction of it to give)")
    else:
        print(f"  ceiling at batch 8: x{ceiling:.2f}; section 3's batch-8 tokens/s x{batch.speedup(8):.2f} over batch 1 "
              f"= {batch.speedup(8) / ceiling:.2f} of it (target >= {CEILING_SHARE})")
        ceiling_factors(batch, uniform)
    forward_breakdown(native.inner, run, width, cached, args)
    return ceiling


def uniform_forward(network: torch.nn.Module, b: int, width: int, cached: int,
                    device: torch.device) -> Callable[[], None]:
    """The ceiling's call: one forward of ``b`` uniform rows, ``width`` new tokens each on ``cached`` entries under a
    dense mask, as ReFusion's forwards have; the new entries are dropped after it, so it can be timed again."""
    cache = network.new_cache(b, cached + width)
    network(torch.zeros(b, cached, dtype=torch.long, device=device), cache=cache)
    ids = torch.zeros(b, width, dtype=torch.long, device=device)
    mask = torch.ones(b, 1, width, cached + width, dtype=torch.bool, device=device)

    def call() -> None:
        network(ids, attention_mask=mask, cache=cache)
        for row in range(b):
            cache.truncate(row, cached)

    return call


def forward_gain(network: torch.nn.Module, width: int, cached: int, args) -> dict[int, float]:
    """What batching one forward gains with no decoder around it and no padding: ``uniform_forward`` at each batch
    size, ``width`` new tokens per row (what a batch-1 forward of section 3 feeds on average) on ``cached`` entries
    (a mean prompt and half the canvas), timed alone in interleaved rounds. ``B * t(1) / t(B)`` bounds what any
    decoder can gain from batching such forwards on this device. Returns the median seconds of one call by batch
    size."""
    device = torch.device(args.device)
    times: dict[int, list[float]] = {b: [] for b in args.batches}
    calls = {b: uniform_forward(network, b, width, cached, device) for b in args.batches}
    for call in calls.values():
        call()  # warm-up
    for r in range(10 * args.rounds):
        for b in round_order(args.batches, r):
            times[b].append(timed(device, calls[b])[1])
    median = {b: statistics.median(t) for b, t in times.items()}
    one = median[args.batches[0]] / args.batches[0]
    print(f"\n   one forward alone: {width} new tokens per row on {cached} cached entries (dense mask), "
          f"medians of {10 * args.rounds} interleaved rounds")
    for b, t in times.items():
        ms = Spread.of(t).scaled(1e3)
        print(f"  batch {b:3d}: {ms.median:7.3f} ms {ms.bracket(3)}  gain from batching x{b * one / median[b]:.2f}")
    return median


def ceiling_factors(batch: BatchTimes, uniform: dict[int, float]) -> None:
    """Section 3's batch-8 speed-up over the ceiling as four factors that multiply back to it exactly. With n_b the
    network calls of a round at batch b, F_b their time, T_b the round's and u_b one uniform forward's:
    T_1/T_8 / (8 u_1/u_8) = (n_1 / 8 n_8) x ((F_1/n_1) / u_1) x (u_8 / (F_8/n_8)) x ((T_1/F_1) / (T_8/F_8)).
    The first two are set by the workload and by how the ceiling is drawn, the last by the decoder; the closing line
    says how fast the third, the batched forward against uniform rows, would have to be for the target."""
    n1, n8 = batch.forwards[1], batch.forwards[8]
    f1, f8 = batch.network_s[1] / n1, batch.network_s[8] / n8
    own1, own8 = batch.round_s[1] / batch.network_s[1], batch.round_s[8] / batch.network_s[8]
    batched = uniform[8] / f8
    factors = [
        ("rows a forward", f"{n1 / n8:.2f} of 8", n1 / (8 * n8),
         "rows leave as they finish: a waiting prompt refills a row, an empty queue does not"),
        ("batch-1 forward", f"{f1 * 1e3:.3f} ms against {uniform[1] * 1e3:.3f}", f1 / uniform[1],
         "the decode's mean batch-1 forward against the ceiling's (cost is not linear in the width)"),
        ("batch-8 forward", f"{f8 * 1e3:.3f} ms against {uniform[8] * 1e3:.3f}", batched,
         "the ceiling's uniform rows against the decode's mean batch-8 forward (widths and caches differ)"),
        ("own work", f"x{own1:.3f} against x{own8:.3f}", own1 / own8,
         "round time over network time, batch 1 against batch 8"),
    ]
    print("\n   batch 8 over the ceiling, in factors that multiply back to it:")
    for name, detail, value, why in factors:
        print(f"  {name:16s} {detail:28s} {value:5.2f}  ({why})")
    product = math.prod(value for _, _, value, _ in factors)
    print(f"  {'product':45s} {product:5.2f}")
    print(f"  for {CEILING_SHARE} of the ceiling, with the other factors as measured, a batch-8 forward of the decode "
          f"would need {CEILING_SHARE * batched / product:.2f}x the speed of the ceiling's uniform rows")


def decode_forward(network: torch.nn.Module, run: Callable[[int], None], b: int,
                   width: int) -> tuple[Callable[[], None], str]:
    """One forward of section 3's decode at ``b`` rows in flight, replayable: of the forwards with all ``b`` rows,
    the one whose real tokens come closest to ``b * width`` (a ceiling forward's), with copies of its inputs and
    cache. The decode is deterministic, so a first pass finds it and a second copies it. Returns the call and its
    shape in words."""
    real: list[tuple[int, int]] = []  # (rows, real tokens) of each forward
    chosen: dict[str, object] = {}

    def note(_module, inputs, kwargs) -> None:
        ids, ragged = inputs[0], kwargs.get("ragged")
        real.append((ids.shape[0], ids.numel() if ragged is None or ragged.real is None else ragged.real.numel()))

    def keep(_module, inputs, kwargs) -> None:
        if len(real) == target:
            chosen.update(ids=inputs[0].clone(), kwargs={**kwargs, "cache": copy.deepcopy(kwargs["cache"])})
        real.append((0, 0))

    hook = network.register_forward_pre_hook(note, with_kwargs=True)
    run(b)
    hook.remove()
    full = [i for i, (rows, _) in enumerate(real) if rows == b]
    target = min(full, key=lambda i: abs(real[i][1] - b * width))
    tokens = real[target][1]
    real.clear()
    hook = network.register_forward_pre_hook(keep, with_kwargs=True)
    run(b)
    hook.remove()
    ids, kwargs = chosen["ids"], chosen["kwargs"]
    cache = kwargs["cache"]
    lengths = list(cache.lengths)

    def call() -> None:
        network(ids, **kwargs)
        for row, n in enumerate(lengths):
            cache.truncate(row, n)

    shape = (f"{b} rows padded to {ids.shape[1]} new tokens ({tokens} real) on {min(lengths)}-{max(lengths)} "
             "cached entries")
    return call, shape


def profiler_settings(cuda: bool) -> tuple[list[ProfilerActivity], str]:
    """What torch.profiler records and which own-time field to read: the device's time on CUDA, else the CPU's."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return activities, "self_device_time_total" if cuda else "self_cpu_time_total"


def op_self_times(call: Callable[[], None], n: int, cuda: bool) -> dict[str, tuple[float, float]]:
    """Each op's own time (us) and calls, means over ``n`` profiled calls after a warm-up."""
    call()
    activities, own = profiler_settings(cuda)
    with profile(activities=activities) as prof:
        for _ in range(n):
            call()
    return {e.key: (getattr(e, own) / n, e.count / n) for e in prof.key_averages()}


def forward_breakdown(network: torch.nn.Module, run: Callable[[int], None], width: int, cached: int, args) -> None:
    """Section 3's batch-8 forward beside the ceiling's batch-8 forward, op by op: where the decode's batched forward
    spends more than the uniform one (rows of different lengths padded to the widest, cache writes by index, the
    mask built from the layout, packing)."""
    device, cuda = torch.device(args.device), args.device.startswith("cuda")
    n = 10 * args.rounds
    call, shape = decode_forward(network, run, 8, width)
    decode = op_self_times(call, n, cuda)
    uniform = op_self_times(uniform_forward(network, 8, width, cached, device), n, cuda)
    total = {name: sum(t for t, _ in ops.values()) for name, ops in (("decode", decode), ("uniform", uniform))}
    print(f"\n   one batch-8 forward of the decode ({shape}) against the ceiling's (8 rows of {width} on {cached}); "
          f"profiler self time, us, means of {n} calls: {total['decode']:.0f} against {total['uniform']:.0f}. "
          "The ops that differ most:")
    zero = (0.0, 0.0)
    names = sorted(set(decode) | set(uniform), key=lambda k: -abs(decode.get(k, zero)[0] - uniform.get(k, zero)[0]))
    for name in names[:12]:
        (d, dn), (u, un) = decode.get(name, zero), uniform.get(name, zero)
        print(f"  {name[:48]:48s} {d:8.1f} ({dn:3.0f} calls)  {u:8.1f} ({un:3.0f} calls)  {d - u:+8.1f}")
