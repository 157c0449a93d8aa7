"""ReFusion speed, side by side in one run (interleaved rounds, medians with min-max spread, one torch thread on CPU).

Networks: the tiny-refusion checkpoint (models/tiny.py), loaded natively and through transformers, wrapped so the
acceptance rate is known (benchmarks/refusion_cases.py: every slot accepted, 90% of tokens, or none: the worst case).

Sections:
  1. project decoder on the native network vs the same decoder on transformers' network vs the published decoder on
     its own network class (``--reference PATH`` to a checkout of it, run by ``--reference-python`` in an
     environment it imports in, through benchmarks/refusion_reference.py; the row is skipped, with the reason, when
     absent or not importable), with the project decoder's time inside its native network's forwards over the
     published decoder's wall time beside the ratio: the floor that no cut in the decoder's own work goes below;
  2. time per generated token and per forward at each canvas for the three acceptance regimes, batch 1: ReFusion
     with the serial block size held fixed (``--serial-block``, default 128: a longer canvas adds serial blocks, as
     the paper's settings do, 512 tokens in 4 to 64 of them) beside the AR decoder (models/decoders/ar.py) on
     transformers' Qwen3ForCausalLM from the same checkpoint in the same regime wrapper, in the same interleaved
     rounds, each decoder's time per forward also split into its network's calls and its own work; then ReFusion in
     two serial blocks at every canvas (a longer canvas means larger blocks);
  3. tokens/s at several batch sizes: the same prompts (of different lengths, 90% acceptance) decoded with that
     many rows in flight (continuous batching: a prompt starts in the row of the first to finish);
  4. (not run by default) where section 3's time goes, by torch.profiler: forwards, tokens fed (pads included),
     time in the attention kernel and in matrix products, against the time of every op, at each batch size; then
     one forward of a batch-1 forward's width timed alone (no profiler) at each batch size: the gain batching the
     network itself gives, the ceiling of section 3's, with section 3's batch-8 speed-up as a fraction of it, split
     into four factors that multiply back to it (rows a forward, the batch-1 forward mix, the batch-8 forward, the
     decoder's own work); then one batch-8 forward of the decode beside one of the ceiling's, op by op, to show where
     the difference goes.

The targets close the run: each ratio against its bound, PASS or FAIL, or why it was not measured.

    python benchmarks/refusion.py [--canvas 128 256 512 1024] [--serial-block 128] [--batches 1 4 8 16] [--rounds 3]
                                  [--sections 1 2 3 4] [--reference PATH [--reference-python PY]]
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
from dataclasses import dataclass
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from models.decoders.ar import ARConfig, ar_generate
from models.networks.hf_causal import TransformersCausalLM
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_row, refusion_decode_rows
from models.networks.loading import load_network
from models.tiny import materialize
from harness.timing.forward_timer import ForwardTimer
from harness.timing.clock import timed
from refusion_cases import NO_EOS, REGIMES, biased, make_prompts
from refusion_published import PublishedUnavailable, PublishedWorker

TARGETS = {"wall vs published (all canvases)": 0.7, "per-token 1024/128 at 90%": 1.3, "batch 8 / batch 1 tokens/s": 2.5}
FORWARD_GROWTH = 1.1  # ReFusion's time per forward (fixed serial blocks), largest canvas over smallest, over AR's
CEILING_SHARE = 0.8  # section 3's batch-8 speed-up over section 4's one-forward-alone gain at batch 8
# Section 3's rounds per --rounds: its decodes take a fraction of a second, and three of them swung its batch-8
# ratio 0.53-0.71 between consecutive runs of the same code
BATCH_ROUNDS = 3


def networks(regime: str, max_pos: int, args, period: int | None = None):
    folder = materialize("tiny-refusion")
    from transformers import Qwen3ForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    dtype = getattr(torch, args.dtype)
    hf = Qwen3ForCausalLM.from_pretrained(folder, dtype=dtype).to(args.device).eval()
    native = load_network(folder, "qwen3", dtype=dtype).to(args.device)
    vocab, mask_id = hf.config.vocab_size, hf.config.mask_token_id
    return (biased(native, regime, max_pos, vocab, mask_id, period), biased(hf, regime, max_pos, vocab, mask_id, period),
            mask_id)


def summary(times: list[float]) -> str:
    return f"{statistics.median(times):8.3f}s [{min(times):.3f}-{max(times):.3f}]"


def start_published(args, prompts: int) -> tuple[PublishedWorker | None, str]:
    """The published decoder's worker, or (None, why not)."""
    if not args.reference:
        return None, "no --reference given"
    try:
        return PublishedWorker(args.reference_python or sys.executable, args.reference, materialize("tiny-refusion"),
                               prompts=prompts, device=args.device, dtype=args.dtype, threads=args.threads), ""
    except PublishedUnavailable as error:  # e.g. the checkout does not import here (it targets transformers 4.x)
        return None, str(error)


def section_reference(args) -> dict[str, float]:
    """Each regime of ``--reference-regimes`` and canvas: the three decoders on the same prompts, rounds interleaved.
    Returns, by regime, the project's (native network) wall time over the published decoder's, summed over the
    canvases of at least 512 (the issue's bar: mostly accepted and never confident, where the decoder's own work is
    largest), and over all canvases for 90%."""
    cases = {"prompts": 3, "slot_size": 8, "serial_num_blocks": 2}
    prompts = make_prompts(cases["prompts"], args.device)
    worker, why = start_published(args, cases["prompts"])
    ratios: dict[str, float] = {}
    for regime in args.reference_regimes:
        ratio = reference_regime(args, regime, prompts, cases, worker, why)
        ratios.update({f"{regime} {key}": value for key, value in ratio.items()})
    if worker is not None:
        worker.close()
    return ratios


def reference_regime(args, regime: str, prompts, cases: dict, worker: PublishedWorker | None,
                     why: str) -> dict[str, float]:
    native, hf, mask_id = networks(regime, 4096, args)

    device = torch.device(args.device)
    inside: dict[tuple[str, int], list[float]] = {}  # time in the network's forwards (the wrapper's included)

    def project(name: str, network, canvas: int) -> tuple[float, list[list[int]]]:
        cfg = RefusionConfig(gen_length=canvas, slot_size=cases["slot_size"],
                             serial_num_blocks=cases["serial_num_blocks"], mask_id=mask_id, eos_id=NO_EOS)
        with ForwardTimer(network, device) as forwards:
            tokens, seconds = timed(device, lambda: [refusion_decode_row(network, p[None], cfg).token_ids
                                                     for p in prompts])
        inside.setdefault((name, canvas), []).append(forwards.seconds())
        return seconds, tokens

    rows: dict[str, Callable[[int], tuple[float, list[list[int]]]]] = {
        "project, native network": lambda c: project("native", native, c),
        "project, transformers network": lambda c: project("transformers", hf, c),
    }
    if worker is not None:
        def published(canvas: int) -> tuple[float, list[list[int]]]:
            answer = worker.decode(canvas, regime, slot_size=cases["slot_size"],
                                   serial_num_blocks=cases["serial_num_blocks"])
            return answer.seconds, answer.tokens

        rows["published decoder"] = published
    canvases = args.reference_canvas
    tokens = {(name, c): fn(c)[1] for c in canvases for name, fn in rows.items()}  # warm-up; compared below
    times: dict[tuple[str, int], list[float]] = {key: [] for key in tokens}
    for _ in range(args.rounds):
        for c in canvases:
            for name, fn in rows.items():
                seconds, out = fn(c)
                times[name, c].append(seconds)
                if out != tokens[name, c]:
                    raise RuntimeError(f"{name}: tokens changed between rounds at canvas {c}")
    print(f"\n## 1. same cases ({cases['prompts']} prompts, regime {regime}, {cases['serial_num_blocks']} serial "
          "blocks), wall time per round, by canvas")
    for c in canvases:
        base = statistics.median(times["project, transformers network", c])
        for name in rows:
            same = tokens[name, c] == tokens["project, transformers network", c]
            print(f"  {c:5d} {name:30s} {summary(times[name, c])}  x{statistics.median(times[name, c]) / base:.2f}"
                  f" of transformers  tokens identical: {same}")
    if worker is None:
        print(f"        published decoder              skipped ({why})")
        return {}
    median = {key: statistics.median(t) for key, t in times.items()}
    network = {c: statistics.median(inside["native", c][1:]) for c in canvases}  # [0]: the warm-up
    for c in canvases:
        print(f"  canvas {c:5d}: project (native) / published = "
              f"{median['project, native network', c] / median['published decoder', c]:.2f}; its network forwards "
              f"alone / published = {network[c] / median['published decoder', c]:.2f} (no decoder work can go below)")

    def over(selected: list[int], project: Callable[[int], float]) -> float:
        return sum(project(c) for c in selected) / sum(median["published decoder", c] for c in selected)

    def wall(c: int) -> float:
        return median["project, native network", c]

    large = [c for c in canvases if c >= 512]
    return {"all canvases": over(canvases, wall),
            **({"512+": over(large, wall), "512+ network": over(large, network.__getitem__)} if large else {})}


ROWS = ("refusion", "ar")  # section 2's fixed-block table: ReFusion and the AR decoder, alternated within a round


def fixed_block_config(canvas: int, args, mask_id: int) -> RefusionConfig | None:
    """ReFusion at ``canvas`` in serial blocks of ``--serial-block`` tokens, or None where the canvas does not split
    into whole blocks."""
    if canvas % args.serial_block:
        return None
    return RefusionConfig(gen_length=canvas, slot_size=8, serial_num_blocks=canvas // args.serial_block,
                          mask_id=mask_id, eos_id=NO_EOS)


def cell(times: list[float], digits: int = 3) -> str:
    return f"{statistics.median(times):9.3f} [{min(times):.{digits}f}-{max(times):.{digits}f}]"


def section_canvas(args) -> dict[str, float | None]:
    """Batch 1, one prompt, each regime: ReFusion with the serial block size held fixed (a longer canvas adds serial
    blocks) and the AR decoder on transformers' network from the same checkpoint, in the same regime wrapper, at the
    same canvases; then ReFusion in two serial blocks at every canvas (a longer canvas means larger blocks). Every
    decode of a regime is timed in the same interleaved rounds (canvases and decoders alternate; the order of the
    decoders flips every other round). Forwards are counted on the warm-up decode (greedy decodes: the same every
    round). Returns the ratios the targets read: time per forward at the largest canvas over the smallest, ReFusion's
    (fixed blocks) over AR's, by regime; and the two-block per-token growth at 90%."""
    device = torch.device(args.device)
    lo, hi = min(args.canvas), max(args.canvas)
    fixed = [c for c in args.canvas if c % args.serial_block == 0]
    ratios: dict[str, float | None] = {}
    tables: dict[str, dict[tuple[str, int], tuple[int, list[float]]]] = {}
    decoder_own: dict[str, dict[tuple[str, int], float]] = {}  # time outside network forwards per forward
    prompt = make_prompts(1, args.device)[0][None]
    ones = torch.ones_like(prompt)
    for regime in REGIMES:  # rejections repeat every serial block: each block has the same mix of forwards
        native, hf, mask_id = networks(regime, 4096, args, period=args.serial_block)
        runs: dict[tuple[str, int], tuple[torch.nn.Module, Callable[[], list[int]]]] = {}
        for c in args.canvas:
            two = RefusionConfig(gen_length=c, slot_size=8, serial_num_blocks=2, mask_id=mask_id, eos_id=NO_EOS)
            runs["two blocks", c] = native, lambda cfg=two: refusion_decode_row(native, prompt, cfg).token_ids
            cfg = fixed_block_config(c, args, mask_id)
            if cfg is None:
                continue
            runs["refusion", c] = native, lambda cfg=cfg: refusion_decode_row(native, prompt, cfg).token_ids
            ar_cfg = ARConfig(max_new_tokens=c, eos_ids=(NO_EOS,), pad_id=0)
            runs["ar", c] = hf, lambda cfg=ar_cfg: ar_generate(TransformersCausalLM(hf), prompt, ones,
                                                                cfg).rows[0].token_ids
        forwards = {}
        for (row, c), (network, decode) in runs.items():  # warm-up, counting the network's calls
            with ForwardTimer(network.inner, device) as counter:
                filled = len(decode())
            if filled != c:
                raise RuntimeError(f"section 2, {regime}, {row}: {filled} tokens at canvas {c} (NO_EOS fills it)")
            forwards[row, c] = counter.calls
        times: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
        outside: dict[tuple[str, int], list[float]] = {key: [] for key in runs}  # the decoder's own time
        for r in range(args.rounds):
            order = ROWS + ("two blocks",) if r % 2 == 0 else ("two blocks",) + ROWS[::-1]
            for c in args.canvas:
                for row in order:
                    if (row, c) in runs:
                        network, decode = runs[row, c]
                        with ForwardTimer(network, device) as inside:  # the wrapper counts as network
                            seconds = timed(device, decode)[1]
                        times[row, c].append(seconds)
                        outside[row, c].append(seconds - inside.seconds())
        tables[regime] = {key: (forwards[key], times[key]) for key in runs}
        decoder_own[regime] = {key: statistics.median(t) / forwards[key] for key, t in outside.items()}
        per_forward = {key: statistics.median(t) / forwards[key] for key, t in times.items()}
        if len(fixed) >= 2:
            growth = {row: per_forward[row, max(fixed)] / per_forward[row, min(fixed)] for row in ROWS}
            ratios[f"fixed {regime}"] = growth["refusion"] / growth["ar"]
        else:
            ratios[f"fixed {regime}"] = None
        if regime == "90%":
            ratios["two blocks 90%"] = statistics.median(times["two blocks", hi]) / hi / (
                statistics.median(times["two blocks", lo]) / lo)

    print(f"\n## 2. time per generated token and per forward (ms), batch 1, one prompt of {prompt.shape[1]} ids, "
          f"medians [min-max] of {args.rounds} interleaved rounds")
    print(f"   ReFusion in serial blocks of {args.serial_block} tokens (slots of 8): a longer canvas adds serial "
          "blocks (the paper's settings: 512 tokens in 4 to 64)")
    print("   on the native network; AR = models.decoders.ar.ar_generate (greedy, KV cache, one forward per token) on "
          "transformers' Qwen3ForCausalLM")
    print("   built from the same tiny-refusion checkpoint, in the same regime wrapper (benchmarks/refusion_cases.py), "
          "so the logits cost alike;")
    print(f"   the 90% regime's seeded rejections repeat every {args.serial_block} positions, so every serial block "
          "has the same mix of forwards")
    if len(fixed) < len(args.canvas):
        print(f"   canvases {', '.join(str(c) for c in args.canvas if c not in fixed)}: not a multiple of "
              f"--serial-block {args.serial_block}, only in the two-block table")
    print(f"  {'regime':8s} {'decoder':9s} {'canvas':>6s} {'blocks':>6s} {'forwards':>8s}"
          f" {'ms/token [min-max]':>26s} {'ms/forward [min-max]':>26s}")
    for regime, table in tables.items():
        for row in ROWS:
            for c in fixed:
                calls, t = table[row, c]
                blocks = f"{c // args.serial_block:6d}" if row == "refusion" else f"{'-':>6s}"
                print(f"  {regime:8s} {row:9s} {c:6d} {blocks} {calls:8d} {cell([s / c * 1e3 for s in t]):>26s}"
                      f" {cell([s / calls * 1e3 for s in t]):>26s}")
        if len(fixed) >= 2:
            a, b = min(fixed), max(fixed)
            growth = {row: statistics.median(table[row, b][1]) / table[row, b][0]
                      / (statistics.median(table[row, a][1]) / table[row, a][0]) for row in ROWS}
            print(f"  {regime:8s} time per forward {b}/{a}: ReFusion x{growth['refusion']:.2f}, "
                  f"AR x{growth['ar']:.2f}; ReFusion's growth / AR's = {ratios[f'fixed {regime}']:.2f}")
            own = decoder_own[regime]
            print(f"  {regime:8s} of it outside network forwards, ms per forward at {a} and {b}: ReFusion "
                  f"{own['refusion', a] * 1e3:.3f} and {own['refusion', b] * 1e3:.3f} "
                  f"(x{own['refusion', b] / own['refusion', a]:.2f}), AR {own['ar', a] * 1e3:.3f} and "
                  f"{own['ar', b] * 1e3:.3f} (x{own['ar', b] / own['ar', a]:.2f})")

    print("\n   the same with two serial blocks at every canvas (a longer canvas means larger blocks), ReFusion, "
          "native network: time per generated token (ms), then per forward")
    print("  regime    " + "".join(f"{c:>22d}" for c in args.canvas))
    for regime, table in tables.items():
        two = {c: table["two blocks", c] for c in args.canvas}
        print(f"  {regime:8s}" + "".join(cell([s / c * 1e3 for s in two[c][1]], 2) for c in args.canvas))
        print(f"  {'  /fwd':8s}" + "".join(cell([s / two[c][0] * 1e3 for s in two[c][1]], 2) for c in args.canvas))
        print(f"  {'  fwds':8s}" + "".join(f"{two[c][0]:9d}{'':12s}" for c in args.canvas))
    return ratios


def batch_workload(args) -> tuple[torch.nn.Module, list[torch.Tensor], Callable[[int], None]]:
    """Section 3's workload: the 90% network, the prompts (as many as the largest batch), and a function decoding all
    of them with a number of rows in flight (each later prompt starts in the row of the first to finish). The
    prompts go longest first, the order in which a run batches them (harness.run.generation.length_order)."""
    native, _, mask_id = networks("90%", 4096, args)
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
        for b in args.batches if r % 2 == 0 else args.batches[::-1]:
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
        print(f"  batch {b:3d}: {rate[b]:9.1f} tokens/s  (round {summary(t)})  x{rate[b] / rate[first]:.2f}"
              f"   in network forwards {summary(inside[b])}  x{net[first] / net[b]:.2f}  ({forwards[b]} forwards)")
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
    for _ in range(args.rounds):
        for b in args.batches:
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
    for _ in range(10 * args.rounds):
        for b in args.batches:
            times[b].append(timed(device, calls[b])[1])
    median = {b: statistics.median(t) for b, t in times.items()}
    one = median[args.batches[0]] / args.batches[0]
    print(f"\n   one forward alone: {width} new tokens per row on {cached} cached entries (dense mask), "
          f"medians of {10 * args.rounds} interleaved rounds")
    for b, t in times.items():
        print(f"  batch {b:3d}: {median[b] * 1e3:7.3f} ms [{min(t) * 1e3:.3f}-{max(t) * 1e3:.3f}]"
              f"  gain from batching x{b * one / median[b]:.2f}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canvas", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--serial-block", type=int, default=128,
                        help="section 2's fixed serial block size in tokens (a multiple of the slot size, 8)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--batch-canvas", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", default=None, help="path to a checkout of the published ReFusion code")
    parser.add_argument("--reference-canvas", type=int, nargs="+", default=[128, 512, 1024],
                        help="canvases of section 1")
    parser.add_argument("--reference-regimes", nargs="+", default=["90%", "all", "random"], choices=REGIMES,
                        help="acceptance regimes of section 1")
    parser.add_argument("--reference-python", default=None,
                        help="the Python of an environment the checkout imports in (default: this one)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--sections", type=int, nargs="+", default=[1, 2, 3],
                        help="which sections to run (4: a profile of section 3)")
    args = parser.parse_args()
    if args.serial_block < 8 or args.serial_block % 8:
        parser.error(f"--serial-block must be a positive multiple of the slot size 8, got {args.serial_block}")
    torch.set_num_threads(args.threads)
    print(f"# ReFusion benchmark: tiny-refusion, {args.dtype}, {args.device}, {args.threads} thread(s), "
          f"{args.rounds} rounds")
    with torch.no_grad():
        reference = section_reference(args) if 1 in args.sections else {}
        canvas = section_canvas(args) if 2 in args.sections else {}
        batch = section_batch(args) if 3 in args.sections else None
        ceiling = section_profile(args, batch) if 4 in args.sections else None
    lo, hi = min(args.canvas), max(args.canvas)
    fixed = [c for c in args.canvas if c % args.serial_block == 0]
    growth = f"{max(fixed)}/{min(fixed)}" if len(fixed) >= 2 else f"{hi}/{lo}"
    has_1_8 = 1 in args.batches and 8 in args.batches
    # (name, value, ">=" or "<=", bound, why not measured)
    targets = [
        ("wall vs published, 90% (all canvases)", reference.get("90% all canvases"), "<=",
         TARGETS["wall vs published (all canvases)"], "not measured (run --sections 1 with --reference)"),
        *((f"wall vs published, {regime} (512 and up)", reference.get(f"{regime} 512+"), "<=",
           TARGETS["wall vs published (all canvases)"], "not measured (run --sections 1 with --reference)")
          for regime in args.reference_regimes),
        (f"per-token {hi}/{lo} at 90% (two blocks)", canvas.get("two blocks 90%"), "<=",
         TARGETS["per-token 1024/128 at 90%"], "not measured (run --sections 2)"),
    ]
    for regime in REGIMES:
        targets.append((f"per-forward {growth} over AR's, {regime}", canvas.get(f"fixed {regime}"), "<=",
                        FORWARD_GROWTH,
                        "not measured (run --sections 2)" if 2 not in args.sections else
                        f"not measured (needs two canvases that are multiples of --serial-block {args.serial_block})"))
    batch_why = "not measured (needs --batches with 1 and 8)" if not has_1_8 else "not measured (run --sections 3)"
    speedup = batch.speedup(8) if batch is not None else None
    targets.append(("batch 8 / batch 1 tokens/s", speedup, ">=", TARGETS["batch 8 / batch 1 tokens/s"], batch_why))
    share = speedup / ceiling if speedup is not None and ceiling is not None else None
    targets.append(("batch 8 / one-forward ceiling", share, ">=", CEILING_SHARE,
                    batch_why if not has_1_8 else "not measured (run --sections 3 4)"))
    print("\n## targets")
    for name, value, op, bound, why in targets:
        if value is None:
            print(f"  {name:40s} {why}")
            continue
        ok = value >= bound if op == ">=" else value <= bound
        print(f"  {name:40s} {value:6.2f} (target {op} {bound})  {'PASS' if ok else 'FAIL'}")
    for regime in args.reference_regimes:
        if f"{regime} 512+ network" in reference:
            print(f"  {f'(wall, {regime}: network forwards alone)':40s} {reference[f'{regime} 512+ network']:6.2f}")
    if batch is not None:
        print(f"  {'(its network forwards alone)':40s} {batch.network_speedup(8):6.2f}")
    if ceiling is not None:
        print(f"  {'(one forward alone, batch 8)':40s} {ceiling:6.2f}")

if __name__ == "__main__":
    main()
