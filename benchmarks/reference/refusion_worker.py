"""Worker for the ``refusion_reference`` benchmark and tests/models/decoders/test_refusion_published.py: the published
ReFusion decoder on its own network class, run with the Python of an environment the published code imports in (it
targets transformers 4.x; docs/benchmarks.md gives one).

It loads the checkpoint with the checkout's ``qwen3.modeling_qwen3_refusion.Qwen3ForCausalLM``, prints one JSON line
``{"ready": true}``, then answers each JSON line on stdin, a case such as ``{"canvas": 128, "regime": "90%"}`` (and
optionally ``slot_size``, ``serial_num_blocks``, ``slot_threshold``, ``token_threshold``), by decoding every prompt
once with the network wrapped as the project side wraps its own (benchmarks/common/regimes.py) and printing
``{"seconds": s, "tokens": [...], "forwards": [...]}``: the wall time of the decode measured in here, and per prompt
the generated ids and the network calls. A caller asks for one case at a time, so its own rounds interleave.

    PY benchmarks/reference/refusion_worker.py --reference CHECKOUT --checkpoint FOLDER [--prompts 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for benchmarks.common's torch-only parts
from benchmarks.common.regimes import NO_EOS, biased, make_prompts  # noqa: E402


def synchronized(device: str) -> None:
    """Wait for the accelerator, so the wall clock covers the work queued before it (this environment cannot
    import the project's harness.timing.clock)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class _Tokenizer:
    eos_token_id = NO_EOS  # the published decoder reads only this


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="checkout of the published ReFusion code")
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder (config.json + weights)")
    parser.add_argument("--prompts", type=int, default=3)
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
    calls = [0]
    inner.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    mask_id, vocab = inner.config.mask_token_id, inner.config.vocab_size
    wrapped = {}
    prompts = make_prompts(args.prompts, args.device)

    def decode(case: dict) -> tuple[list[list[int]], list[int]]:
        regime = case.get("regime", "90%")
        model = wrapped.setdefault(regime, biased(inner, regime, 4096, vocab, mask_id))
        options = {k: case[k] for k in ("slot_size", "serial_num_blocks", "slot_threshold", "token_threshold")
                   if k in case}
        outs, forwards = [], []
        for p in prompts:
            calls[0] = 0
            x, _ = generate.generate_refusion(model, _Tokenizer(), p[None], gen_length=case["canvas"],
                                              mask_id=mask_id, **options)
            outs.append(x[0, p.shape[0]:].tolist())
            forwards.append(calls[0])
        return outs, forwards

    print(json.dumps({"ready": True}), file=answers, flush=True)
    with torch.no_grad():
        for line in sys.stdin:
            if not line.strip():
                continue
            case = json.loads(line)
            synchronized(args.device)
            t0 = time.perf_counter()
            tokens, forwards = decode(case)
            synchronized(args.device)
            print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": tokens, "forwards": forwards}),
                  file=answers, flush=True)


if __name__ == "__main__":
    main()
