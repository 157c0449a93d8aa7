"""Worker for benchmarks/refusion.py: the published ReFusion decoder on its own network class, run with the Python of
an environment the published code imports in (it targets transformers 4.x; see docs/benchmarks.md for one).

It loads the checkpoint with the checkout's ``qwen3.modeling_qwen3_refusion.Qwen3ForCausalLM``, wraps it as the
project side wraps its networks (benchmarks/refusion_cases.py), decodes once (warm-up), prints one JSON line
``{"ready": true, "tokens": [...]}``, then answers each line ``round CANVAS`` on stdin with ``{"seconds": s,
"tokens": [...]}`` (the wall time of decoding every prompt once at that canvas, measured in here) until stdin
closes. Rounds are asked for by the project side between its own, so the two interleave.

    PY benchmarks/refusion_reference.py --reference CHECKOUT --checkpoint FOLDER [--prompts 3] [--gen-length 128]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from refusion_cases import NO_EOS, biased, make_prompts, synchronized


class _Tokenizer:
    eos_token_id = NO_EOS  # the published decoder reads only this


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="checkout of the published ReFusion code")
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder (config.json + weights)")
    parser.add_argument("--regime", default="90%")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--gen-length", type=int, default=128, help="canvas of the first (warm-up) decode")
    parser.add_argument("--slot-size", type=int, default=8)
    parser.add_argument("--serial-num-blocks", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    answers, sys.stdout = sys.stdout, sys.stderr  # the published code prints; only answers go to stdout
    sys.path.insert(0, str(Path(args.reference)))
    import generate  # the published module, from the checkout
    from qwen3.modeling_qwen3_refusion import Qwen3ForCausalLM

    inner = Qwen3ForCausalLM.from_pretrained(args.checkpoint, torch_dtype=getattr(torch, args.dtype))
    inner = inner.to(args.device).eval()
    mask_id = inner.config.mask_token_id
    model = biased(inner, args.regime, 4096, inner.config.vocab_size, mask_id)
    prompts = make_prompts(args.prompts, args.device)

    def decode(canvas: int) -> list[list[int]]:
        outs = []
        for p in prompts:
            x, _ = generate.generate_refusion(model, _Tokenizer(), p[None], gen_length=canvas,
                                              mask_id=mask_id, slot_size=args.slot_size,
                                              serial_num_blocks=args.serial_num_blocks)
            outs.append(x[0, p.shape[0]:].tolist())
        return outs

    with torch.no_grad():
        print(json.dumps({"ready": True, "tokens": decode(args.gen_length)}), file=answers, flush=True)
        for line in sys.stdin:
            word, _, canvas = line.partition(" ")
            if word != "round":
                continue
            synchronized(args.device)
            t0 = time.perf_counter()
            tokens = decode(int(canvas))
            synchronized(args.device)
            print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": tokens}), file=answers, flush=True)


if __name__ == "__main__":
    main()
