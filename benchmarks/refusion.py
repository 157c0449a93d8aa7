"""ReFusion speed, side by side in one run (interleaved rounds, medians with min-max spread, one torch thread on CPU).

Networks: the tiny-refusion checkpoint (models/tiny.py), loaded natively and through transformers, wrapped so the
acceptance rate is known: ``all`` adds a large bias at a fixed answer for both heads (every slot accepted by the first
verification), ``90%`` leaves the next-token bias off at a seeded 10% of positions (those tokens fail global
verification and go through in-slot completion), ``random`` has no bias (one slot per round, token by token: the
worst case). The end-of-sequence id is one the network cannot produce, so canvases fill completely.

Sections:
  1. project decoder on the native network vs the same decoder on transformers' network vs the published decoder
     (``--reference PATH`` to a checkout of it; the row is skipped, with the reason, when absent or not importable);
  2. time per generated token at each canvas for the three acceptance regimes;
  3. tokens/s at several batch sizes: the same prompts (of different lengths, 90% acceptance) decoded in batches
     of each size.

    python benchmarks/refusion.py [--canvas 128 256 512 1024] [--batches 1 4 8 16] [--rounds 3] [--reference PATH]
                                  [--sections 1 2 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from models.decoders.refusion import RefusionConfig, refusion_decode_row, refusion_decode_rows
from models.networks.loading import load_network
from models.tiny import materialize

NO_EOS = 10**6
TARGETS = {"wall vs published": 0.7, "per-token 1024/128 at 90%": 1.3, "batch 8 / batch 1 tokens/s": 2.5}


class Biased(torch.nn.Module):
    """Adds ``bias`` at answer(p) for a mask at p (plan head) and at answer(p+1) for a token at p (next-token head),
    except the next-token bias at the positions in ``reject``. Works for both call signatures."""

    def __init__(self, inner: torch.nn.Module, mask_id: int, vocab: int, bias: float, reject: torch.Tensor):
        super().__init__()
        self.inner, self.mask_id, self.vocab, self.bias, self.reject = inner, mask_id, vocab, bias, reject
        if hasattr(inner, "new_cache"):
            self.new_cache = inner.new_cache
        self.config = getattr(inner, "config", None)

    def _nudge(self, logits, input_ids, position_ids):
        n = logits.shape[1]
        ids, pos = input_ids[:, -n:], position_ids[:, -n:]
        is_mask = ids == self.mask_id
        target_pos = torch.where(is_mask, pos, pos + 1)
        answer = (target_pos * 7 + 3) % (self.vocab - 1)
        strength = torch.where(is_mask | ~self.reject[target_pos.clamp_max(len(self.reject) - 1)], self.bias, 0.0)
        return logits.scatter_add(-1, answer[..., None], strength[..., None].to(logits.dtype))

    def forward(self, input_ids, position_ids, **kwargs):
        if hasattr(self.inner, "new_cache"):
            out = self.inner(input_ids, position_ids=position_ids, **kwargs)
        else:
            out = self.inner(input_ids=input_ids, position_ids=position_ids, **kwargs)
        if isinstance(out, torch.Tensor):
            return self._nudge(out, input_ids, position_ids)
        out.logits = self._nudge(out.logits, input_ids, position_ids)
        return out


def networks(regime: str, max_pos: int):
    folder = materialize("tiny-refusion")
    from transformers import Qwen3ForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    hf = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    native = load_network(folder, "qwen3", dtype=torch.float32)
    vocab, mask_id = hf.config.vocab_size, hf.config.mask_token_id
    bias = 0.0 if regime == "random" else 60.0
    reject = torch.rand(max_pos, generator=torch.Generator().manual_seed(0)) < (0.1 if regime == "90%" else 0.0)
    return Biased(native, mask_id, vocab, bias, reject), Biased(hf, mask_id, vocab, bias, reject), mask_id


def make_prompts(n: int, vocab: int = 500) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (int(12 + 17 * i % 40),), generator=g) for i in range(n)]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def summary(times: list[float]) -> str:
    return f"{statistics.median(times):8.3f}s [{min(times):.3f}-{max(times):.3f}]"


def load_reference(path: str | None):
    """generate_refusion from a checkout of the published code, or (None, reason)."""
    if not path:
        return None, "no --reference given"
    if not (Path(path) / "generate.py").is_file():
        return None, f"no generate.py in {path}"
    sys.path.insert(0, str(Path(path)))
    try:
        import generate  # the published module, from the checkout

        return generate.generate_refusion, ""
    except Exception as error:  # it targets transformers 4.x
        return None, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def section_reference(args) -> float | None:
    native, hf, mask_id = networks("90%", 4096)
    cfg = RefusionConfig(gen_length=128, slot_size=8, serial_num_blocks=2, mask_id=mask_id, eos_id=NO_EOS)
    prompts = make_prompts(3)
    reference, why = load_reference(args.reference)
    rows: dict[str, Callable[[], list[list[int]]]] = {
        "project, native network": lambda: [refusion_decode_row(native, p[None], cfg).token_ids for p in prompts],
        "project, transformers network": lambda: [refusion_decode_row(hf, p[None], cfg).token_ids for p in prompts],
    }
    if reference is not None:
        class Tok:
            eos_token_id = NO_EOS

        def published():
            outs = []
            for p in prompts:
                x, _ = reference(hf.inner, Tok(), p[None], gen_length=128, mask_id=mask_id, slot_size=8,
                                 serial_num_blocks=2)
                outs.append(x[0, p.shape[0]:].tolist())
            return outs

        rows["published decoder"] = published
    times = {name: [] for name in rows}
    tokens = {}
    for name, fn in rows.items():
        tokens[name] = fn()  # warm-up, and the tokens compared below
    for _ in range(args.rounds):
        for name, fn in rows.items():
            times[name].append(timed(fn)[0])
    print("\n## 1. same cases (3 prompts, canvas 128, 90% acceptance), wall time per round")
    base = statistics.median(times["project, transformers network"])
    for name in rows:
        same = tokens[name] == tokens["project, transformers network"]
        print(f"  {name:32s} {summary(times[name])}  x{statistics.median(times[name]) / base:.2f} of transformers"
              f"  tokens identical: {same}")
    if reference is None:
        print(f"  published decoder                skipped ({why})")
        return None
    return statistics.median(times["project, native network"]) / statistics.median(times["published decoder"])


def section_canvas(args) -> float:
    print("\n## 2. time per generated token (ms), native network, batch 1")
    print("  regime    " + "".join(f"{c:>22d}" for c in args.canvas))
    per_token = {}
    for regime in ("all", "90%", "random"):
        native, _, mask_id = networks(regime, 4096)
        prompt = make_prompts(1)[0]
        cfgs = {c: RefusionConfig(gen_length=c, slot_size=8, serial_num_blocks=2, mask_id=mask_id, eos_id=NO_EOS)
                for c in args.canvas}
        times = {c: [] for c in args.canvas}
        for c in args.canvas:
            refusion_decode_row(native, prompt[None], cfgs[c])  # warm-up
        for _ in range(args.rounds):
            for c in args.canvas:
                times[c].append(timed(lambda: refusion_decode_row(native, prompt[None], cfgs[c]))[0] / c * 1e3)
        per_token[regime] = {c: statistics.median(t) for c, t in times.items()}
        cells = "".join(f"{statistics.median(t):9.3f} [{min(t):.2f}-{max(t):.2f}]" for t in times.values())
        print(f"  {regime:8s}{cells}")
    lo, hi = min(args.canvas), max(args.canvas)
    return per_token["90%"][hi] / per_token["90%"][lo]


def section_batch(args) -> float | None:
    """Every batch size decodes the same prompts (as many as the largest batch), in consecutive batches of that size,
    so the rates compare one workload run at different batch sizes."""
    native, _, mask_id = networks("90%", 4096)
    cfg = RefusionConfig(gen_length=args.batch_canvas, slot_size=8, serial_num_blocks=2, mask_id=mask_id,
                         eos_id=NO_EOS)
    prompts = make_prompts(max(args.batches))

    def run(b: int) -> None:
        for i in range(0, len(prompts), b):
            refusion_decode_rows(native, prompts[i:i + b], cfg)

    times = {b: [] for b in args.batches}
    for b in args.batches:
        refusion_decode_rows(native, prompts[:b], cfg)  # warm-up
    for _ in range(args.rounds):
        for b in args.batches:
            times[b].append(timed(lambda: run(b))[0])
    print(f"\n## 3. tokens/s by batch size ({len(prompts)} prompts, canvas {args.batch_canvas}, 90% acceptance, native "
          "network)")
    rate = {}
    for b, t in times.items():
        rate[b] = len(prompts) * args.batch_canvas / statistics.median(t)
        print(f"  batch {b:3d}: {rate[b]:9.1f} tokens/s  (round {summary(t)})  x{rate[b] / rate[args.batches[0]]:.2f}")
    return rate[8] / rate[1] if 8 in rate and 1 in rate else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canvas", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--batch-canvas", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", default=None, help="path to a checkout of the published ReFusion code")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sections", type=int, nargs="+", default=[1, 2, 3], help="which sections to run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# ReFusion benchmark: tiny-refusion, fp32, CPU, {args.threads} thread(s), {args.rounds} rounds")
    with torch.no_grad():
        ratios = {"wall vs published": section_reference(args) if 1 in args.sections else None,
                  "per-token 1024/128 at 90%": section_canvas(args) if 2 in args.sections else None,
                  "batch 8 / batch 1 tokens/s": section_batch(args) if 3 in args.sections else None}
    print("\n## targets")
    for name, value in ratios.items():
        target = TARGETS[name]
        if value is None:
            print(f"  {name:28s} not measured")
            continue
        ok = value <= target if name != "batch 8 / batch 1 tokens/s" else value >= target
        print(f"  {name:28s} {value:6.2f} (target {'<=' if name != 'batch 8 / batch 1 tokens/s' else '>='} {target})"
              f"  {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
