"""Worker for tests/models/decoders/test_llada2_published.py: the published LLaDA2 ``generate``
(``modeling_llada2_moe.py``, dFactory ``models/llada2_moe/``) on a checkpoint in the released layout, batch 1.

It runs with the reference environment's Python (benchmarks/reference/llada2_reference.py: same stubs of VeOmni's imports,
same loading checks; the checkpoint in fp32, generate's bf16 mask cast to fp32, which is exact) and writes per case
the generated ids (prompt removed) and the number of model forwards.
``torch.manual_seed(seed)`` precedes each case, so the file's multinomial draws come from the global generator seeded
as the harness seeds its own. The file's early-stop return (``eos_early_stop``) holds the prompt and its normal
return does not; the worker removes a leading prompt in the early-stop case only.

    PY benchmarks/reference/llada2_generate_reference.py --reference=CHECKOUT --checkpoint=FOLDER --cases=IN.json --out=OUT.json

IN.json: ``{"cases": [{"name", "prompt": [ids], "gen_length", "block_length", "steps", "threshold",
"temperature", "top_k", "top_p", "eos_early_stop", "seed", "eos_id", "mask_id"}]}``. OUT.json: name ->
``{"tokens": [...], "forwards": n, "early_return": bool}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llada2_reference import import_modeling, load, stub_veomni  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("reference", "checkpoint", "cases", "out"):
        parser.add_argument(f"--{name}", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    stub_veomni()
    model = load(import_modeling(args.reference), args.checkpoint)
    forwards = [0]
    forward = model.forward  # generate calls self.forward directly (no module hooks fire): count it here

    def counted(*a, **k):
        # generate builds its 0 / -inf mask in bf16, which SDPA refuses next to fp32 queries; both values are
        # exact in fp32, so casting changes nothing but lets the checkpoint run in fp32.
        mask = k.get("attention_mask")
        if mask is not None and mask.dtype != model.dtype:
            k["attention_mask"] = mask.to(model.dtype)
        forwards[0] += 1
        return forward(*a, **k)

    model.forward = counted
    results = {}
    for case in json.loads(args.cases.read_text())["cases"]:
        prompt = torch.tensor([case["prompt"]])
        forwards[0] = 0
        torch.manual_seed(case["seed"])
        with torch.no_grad():
            out = model.generate(prompt, temperature=case["temperature"], block_length=case["block_length"],
                                 steps=case["steps"], gen_length=case["gen_length"], top_p=case["top_p"],
                                 top_k=case["top_k"], eos_early_stop=case["eos_early_stop"],
                                 threshold=case["threshold"], eos_id=case["eos_id"],
                                 mask_id=case["mask_id"])[0].tolist()
        n = len(case["prompt"])
        early = case["eos_early_stop"] and len(out) > n and out[:n] == case["prompt"]
        results[case["name"]] = {"tokens": out[len(case["prompt"]):] if early else out, "forwards": forwards[0],
                                 "early_return": early}
    args.out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
