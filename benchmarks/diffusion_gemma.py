"""DiffusionGemma's speed on tiny-diffusiongemma: tokens/s, forwards per token and decode time outside the network.

The registry's tiny model runs through its adapter exactly as a run does (``harness.run.generation.generate_timed``:
the decode call alone, device synchronised, forwards timed by hooks on the encoder, the decoder and the head), at
batch sizes ``--batch``, after one warm-up call per batch size, in ``--rounds`` interleaved rounds; figures are
medians. Tokens are the harness's (generated up to and including the first end of sequence); a random tiny model
rarely ends early, so a call fills ``ceil(canvas / 16)`` canvases of ``--steps`` denoising steps at most each.

    python -m benchmarks diffusion_gemma [--canvas 32] [--steps 8] [--batch 1 4] [--prompts 4] [--rounds 3]
                                         [--device auto] [--dtype auto]

No target: most of its time outside forwards is transformers' sampler (docs/benchmarks.md); the figures are reported.
``diffusion_gemma_speed(...)`` returns the rows, for the ``decoders`` benchmark to print beside its own. On the CPU
it runs one torch thread.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Sequence

import torch

from benchmarks.common.table import Table, columns
from benchmarks.common.verdict import Report
from harness.run.generation import generate_timed, resolve_device
from models.base import GenerationRequest, Message
from models.registry import load_adapter, spec_for
from models.sources import parse_dtype

QUESTIONS = ("What is 2 + 2?", "Natalia sold clips to 48 of her friends in April. How many in May?",
             "Write a function that adds two numbers.", "Which planet is largest? Answer with one word.")


@dataclass(frozen=True)
class SpeedRow:
    """One batch size's medians over the rounds."""

    batch: int
    tokens_per_second: float
    forwards_per_token: float  # encoder and decoder passes (nfe) per generated token
    decoder_steps_per_token: float  # each row's own denoising passes, as transformers counts them
    outside_share: float  # the part of decode time spent outside the network's passes


@dataclass(frozen=True)
class CallFigures:
    tokens: int
    seconds: float
    forward_seconds: float
    nfe: float
    decoder_steps: float


def timed_call(adapter, config, requests: Sequence[GenerationRequest]) -> CallFigures:
    _, generations, seconds, forward_s = generate_timed(adapter, config, requests)
    return CallFigures(sum(g.gen_tokens for g in generations), seconds, forward_s or 0.0,
                       sum(g.nfe for g in generations), sum(g.decoder_steps or 0 for g in generations))


def row_of(batch: int, calls: Sequence[CallFigures]) -> SpeedRow:
    def median(value) -> float:
        return statistics.median(value(c) for c in calls)

    return SpeedRow(batch, median(lambda c: c.tokens / c.seconds), median(lambda c: c.nfe / c.tokens),
                    median(lambda c: c.decoder_steps / c.tokens), median(lambda c: 1 - c.forward_seconds / c.seconds))


def diffusion_gemma_speed(device: torch.device, dtype: torch.dtype = torch.float32, canvas: int = 32,
                          steps: int = 8, batches: Sequence[int] = (1, 4), prompts: int = 4,
                          rounds: int = 3) -> list[SpeedRow]:
    """Rows of tiny-diffusiongemma at each batch size: ``prompts`` requests of ``canvas`` tokens per round."""
    adapter = load_adapter(spec_for("tiny-diffusiongemma"), device, dtype)
    config = adapter.make_config({"max_denoising_steps": steps}, canvas=canvas, seed=1234)
    requests = [GenerationRequest(messages=(Message("user", QUESTIONS[i % len(QUESTIONS)]),), canvas_tokens=canvas)
                for i in range(prompts)]
    groups = {batch: [requests[i:i + batch] for i in range(0, prompts, batch)] for batch in batches}
    for batch in batches:
        timed_call(adapter, config, groups[batch][0])  # warm-up, as a run's first samples
    calls: dict[int, list[CallFigures]] = {batch: [] for batch in batches}
    for _ in range(rounds):
        for batch in batches:  # interleaved: load on the machine moves every row alike
            calls[batch] += [timed_call(adapter, config, group) for group in groups[batch]]
    return [row_of(batch, calls[batch]) for batch in batches]


TABLE = Table(columns(("batch", 5), ("tokens/s", 10), ("forwards/token", 15), ("decoder steps/token", 20),
                      ("outside forwards", 17)))


def print_rows(rows: Sequence[SpeedRow]) -> None:
    TABLE.print_header()
    for row in rows:
        TABLE.print_row(row.batch, f"{row.tokens_per_second:.1f}", f"{row.forwards_per_token:.3f}",
                        f"{row.decoder_steps_per_token:.3f}", f"{row.outside_share:.1%}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--canvas", type=int, default=32, help="tokens per request (tiny canvases are 16)")
    parser.add_argument("--steps", type=int, default=8, help="max_denoising_steps per canvas")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; figures are their medians")
    parser.add_argument("--device", default="auto", help="as run_eval.py's: auto, cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="auto", help="as run_eval.py's: auto (bfloat16 on cuda), float32, ...")


def run(args: argparse.Namespace, report: Report) -> None:
    device = resolve_device(args.device)
    dtype = parse_dtype(args.dtype, device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    print(f"tiny-diffusiongemma on {device}, {dtype}: {args.prompts} requests of {args.canvas} tokens, at most "
          f"{args.steps} denoising steps per canvas; medians of {args.rounds} interleaved rounds")
    rows = diffusion_gemma_speed(device, dtype, args.canvas, args.steps, args.batch, args.prompts, args.rounds)
    print_rows(rows)
    for row in rows:
        report.info(f"batch {row.batch}: share of decode time outside forwards", row.outside_share)
        report.info(f"batch {row.batch}: tokens/s", row.tokens_per_second)
