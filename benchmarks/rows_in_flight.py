"""Rows in flight against static batches: tokens/s and per-request latency at N rows, side by side.

The same requests (GSM8K test questions through the harness's prompt and each tiny checkpoint's chat template) decode
two ways in interleaved rounds (the order flipped every other round, one torch thread on the CPU):
  * ``static``: batches of N held until their last row finishes (each decoder's ``generate`` per batch), a
    request's latency the whole batch's time;
  * ``continuous``: at most N rows in flight, a waiting request taking the row of the first to finish (the decoders'
    ``stream``), a request's latency from its admission to its last token.
Answers must end at different lengths for rows in flight to matter, and a random network ends none: the network is
wrapped (``EndsAt``) so that every position from ``--stop`` on prefers the end-of-sequence id; an answer then ends
where its prompt's length puts it (stop - prompt length), so lengths vary as GSM8K prompts do. Both schedules give
every request the same tokens (checked). Targets: continuous / static tokens/s >= 1.3 for the decoders that stop at
an end of sequence (AR, ReFusion, SDAR's block diffusion), >= 0.95 for plain LLaDA, which fills its whole canvas
whatever it holds (its rows all take the same forwards, so rows in flight can only keep pace).

    python benchmarks/rows_in_flight.py [--data-dir ../shared/data] [--prompts 64] [--rows 8] [--canvas 128]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from harness.run.runner import to_request
from models.decoders.ar import ARConfig, ar_generate, ar_stream
from models.decoders.block_diffusion import BlockDiffusionConfig, block_diffusion_generate, block_diffusion_stream
from models.decoders.llada import LLaDAConfig, llada_generate, llada_stream
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_rows, refusion_stream
from models.registry import load_adapter, spec_for
from tasks.registry import make_task


class EndsAt(torch.nn.Module):
    """The native network with a large bias on ``eos`` at every position >= ``stop``, for the calls the decoders
    make: ``causal_forward`` (AR), ``block_forward`` (block diffusion) and the native ``forward`` (ReFusion)."""

    def __init__(self, inner: torch.nn.Module, eos: int, stop: int, bias: float = 60.0) -> None:
        super().__init__()
        self.inner, self.eos, self.stop, self.bias = inner, eos, stop, bias

    def new_cache(self, batch: int, capacity: int):
        return self.inner.new_cache(batch, capacity)

    def _ended(self, logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        logits[..., self.eos] += self.bias * (positions >= self.stop).to(logits.dtype)
        return logits

    def causal_forward(self, input_ids, cache, read=None):
        length = input_ids.shape[1]
        positions = torch.tensor(cache.lengths)[:, None] + torch.arange(length)
        logits = self.inner.causal_forward(input_ids, cache, read=read)
        return self._ended(logits, positions.flatten().index_select(0, read) if read is not None else positions)

    def block_forward(self, input_ids, position_ids, cache, block_length, write):
        positions = torch.arange(position_ids.start, position_ids.stop)[None] if isinstance(position_ids, range) \
            else position_ids
        logits = self.inner.block_forward(input_ids, position_ids, cache, block_length, write)
        return self._ended(logits, positions.expand_as(input_ids))

    def forward(self, input_ids, position_ids, ragged=None, **kwargs):
        logits = self.inner(input_ids, position_ids=position_ids, ragged=ragged, **kwargs)
        positions = position_ids.expand_as(input_ids)
        return self._ended(logits, ragged.take(positions) if ragged is not None else positions)


@dataclass(frozen=True)
class Contender:
    """A decoder as this benchmark runs it: its tiny checkpoint and native network, its config at a canvas, its two
    schedules, and whether its answers end at an end of sequence (the network then wrapped in ``EndsAt``)."""

    checkpoint: str
    network: Callable[[Any], torch.nn.Module]  # the adapter's native network
    config: Callable[[int], Any]
    static: Callable[..., tuple[list[list[int]], list[float]]]
    stream: Callable[..., Any]
    stops: bool = True


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
        tokens += [t.token_ids for t in refusion_decode_rows(network, prompts[start:start + rows], cfg)]
        latencies += [time.perf_counter() - began] * len(prompts[start:start + rows])
    return tokens, latencies


def continuous(stream: Callable, network, prompts, cfg, rows) -> tuple[list[list[int]], list[float]]:
    tokens: dict[int, list[int]] = {}
    joined: dict[int, float] = {}
    latencies: dict[int, float] = {}
    with torch.inference_mode():
        step_start = time.perf_counter()
        for step in stream(network, prompts, cfg, rows):
            now = time.perf_counter()
            joined.update({i: step_start for i in step.admitted})
            for i, result in step.finished:
                tokens[i], latencies[i] = result.token_ids, now - joined[i]
            step_start = now
    return [tokens[i] for i in range(len(prompts))], [latencies[i] for i in range(len(prompts))]


TARGET, KEEPS_PACE = 1.3, 0.95
CONTENDERS = {
    "ar": Contender("tiny-qwen3", lambda adapter: adapter.native_network,
                    lambda canvas: ARConfig(max_new_tokens=canvas), static_batches(ar_generate), ar_stream),
    "refusion": Contender("tiny-refusion", lambda adapter: adapter.native_network,
                          lambda canvas: RefusionConfig(gen_length=canvas, slot_size=8, serial_num_blocks=canvas // 32),
                          static_refusion, refusion_stream),
    "sdar": Contender("tiny-sdar", lambda adapter: adapter.network,
                      lambda canvas: BlockDiffusionConfig(gen_length=canvas, block_length=4, denoising_steps=4,
                                                          temperature=0),
                      static_batches(block_diffusion_generate), block_diffusion_stream),
    "llada": Contender("tiny-llada", lambda adapter: adapter.network,
                       lambda canvas: LLaDAConfig(gen_length=canvas, steps=canvas // 2, block_length=32),
                       static_batches(llada_generate), llada_stream, stops=False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="a folder with gsm8k/test.jsonl (default: "
                                                                      "the bundled fixture items, repeated)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--canvas", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decoders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.prompts} GSM8K prompts ({'local split' if args.data_dir else 'fixture items, repeated'}), "
          f"{args.rows} rows, canvas {args.canvas}; medians [min-max] of {args.rounds} interleaved rounds, each "
          f"decoder on its tiny checkpoint's network, one thread")
    print(f"{'decoder':<10} {'schedule':<11} {'tok/s':>8} {'[min-max]':>15} {'p50 s':>7} {'p90 s':>7}  ratio")
    for name in args.decoders:
        contender = CONTENDERS[name]
        adapter = load_adapter(spec_for(contender.checkpoint), torch.device("cpu"), torch.float32)
        prompts = gsm8k_prompts(args.prompts, args.data_dir, adapter)
        lengths = sorted(len(p) for p in prompts)
        cfg = dataclasses.replace(contender.config(args.canvas), **adapter.token_ids())
        stop = lengths[0] + args.canvas // 2  # the shortest prompt's answer fills half the canvas, the longest's less
        network = contender.network(adapter)
        network = EndsAt(network, adapter.eos_ids()[0], stop) if contender.stops else network
        static, stream = contender.static, contender.stream
        modes = {"static": lambda: static(network, prompts, cfg, args.rows),
                 "continuous": lambda: continuous(stream, network, prompts, cfg, args.rows)}
        rates: dict[str, list[float]] = {mode: [] for mode in modes}
        latency: dict[str, list[float]] = {mode: [] for mode in modes}
        outputs = {}
        for round_ in range(args.rounds):
            for mode in (list(modes) if round_ % 2 == 0 else list(modes)[::-1]):
                began = time.perf_counter()
                outputs[mode], latencies = modes[mode]()
                seconds = time.perf_counter() - began
                rates[mode].append(sum(map(len, outputs[mode])) / seconds)
                latency[mode] = latencies
        same = outputs["static"] == outputs["continuous"]
        for mode in modes:
            q = statistics.quantiles(latency[mode], n=10)
            ratio = statistics.median(rates[mode]) / statistics.median(rates["static"])
            print(f"{name:<10} {mode:<11} {statistics.median(rates[mode]):>8.1f} "
                  f"{f'[{min(rates[mode]):.1f}-{max(rates[mode]):.1f}]':>15} {statistics.median(latency[mode]):>7.3f} "
                  f"{q[8]:>7.3f}  {ratio:.2f}x")
        ratio = statistics.median(rates["continuous"]) / statistics.median(rates["static"])
        lengths_out = sorted(len(t) for t in outputs["continuous"])
        target = TARGET if contender.stops else KEEPS_PACE
        verdict = "PASS" if ratio >= target and same else "FAIL"
        print(f"{verdict} {name}: continuous / static tokens/s {ratio:.2f} (target >= {target}), tokens "
              f"{'identical' if same else 'DIFFER'}, prompts of {lengths[0]}-{lengths[-1]} tokens, answers of "
              f"{lengths_out[0]}-{lengths_out[-1]}" + (f" (ending from position {stop})" if contender.stops else ""))


if __name__ == "__main__":
    main()
