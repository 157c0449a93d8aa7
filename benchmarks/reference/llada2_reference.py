"""Worker for tests/models/networks/test_llada2.py: logits (and the router's choices) of the published LLaDA2 MoE
modeling code, ``modeling_llada2_moe.py`` (inclusionAI, the copy in dFactory ``models/llada2_moe/``), on a checkpoint
in the released layout.

It runs with the Python of a reference environment (torch 2.13.0 and transformers 4.52.3, the version the release's
config names; docs/networks.md §5), never this project's: it imports only torch, transformers, safetensors and the
checkout. The dFactory copy imports VeOmni, a training framework, for four names; they are stubbed here:

* ``is_liger_kernel_available`` returns False: the file then keeps its own RMSNorm and RoPE (liger's kernels are
  CUDA-only), which is what it runs without liger installed;
* ``veomni.utils.logging`` is transformers' logging module (the file only takes a logger from it);
* ``fused_moe_forward``, ``get_parallel_state`` and ``causallm_loss_function`` raise when called. The released
  checkpoints' ``model_type`` is ``llada2_moe``, for which the file builds one module per expert and, in eval mode,
  runs ``moe_infer``; only its merged-expert training layout (``llada2_moe_veomni``) would reach the first two, and
  the loss only with labels. The worker checks that path: the experts must be a ModuleList, the attention class the
  SDPA one (transformers' default for this file), every stored tensor must load with none missing, and
  ``moe_infer`` must run once per MoE layer and forward (its count is written to the output).

    PY benchmarks/reference/llada2_reference.py --reference=CHECKOUT --checkpoint=FOLDER --cases=CASES.json --out=OUT.safetensors

CHECKOUT: a folder holding ``modeling_llada2_moe.py`` and ``configuration_llada2_moe.py``. CASES.json:
``{"cases": [{"name": ..., "input_ids": [[ids] per row], "position_ids": [[...]] or null (0..L-1),
"block_length": B or null}]}``; with B the mask is the bool block-causal one (key j visible to query i iff
position_j // B <= position_i // B), with null the model gets no mask. OUT: per case ``NAME`` = fp32 logits
[B, L, vocab] and ``NAME/route/I`` = the expert ids [B*L, k] the I-th MoE layer's router chose; the metadata holds
``moe_infer_calls``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from pathlib import Path

import torch

PACKAGE = "llada2_published"


def unreachable(name: str):
    def call(*args, **kwargs):
        raise RuntimeError(f"{name} is VeOmni's and stubbed: the released-layout inference path must not call it")
    return call


def stub_veomni() -> None:
    """The four VeOmni imports of the dFactory copy (module docstring)."""
    from transformers.utils import logging

    modules = {
        "veomni": {},
        "veomni.ops": {"causallm_loss_function": unreachable("causallm_loss_function"),
                       "fused_moe_forward": unreachable("fused_moe_forward")},
        "veomni.distributed": {},
        "veomni.distributed.parallel_state": {"get_parallel_state": unreachable("get_parallel_state")},
        "veomni.utils": {"logging": logging},
        "veomni.utils.import_utils": {"is_liger_kernel_available": lambda: False},
    }
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module


def import_modeling(checkout: Path) -> types.ModuleType:
    """The checkout's modeling file as a module of a package, so its relative config import resolves."""
    package = types.ModuleType(PACKAGE)
    package.__path__ = [str(checkout)]
    sys.modules[PACKAGE] = package
    return importlib.import_module(f"{PACKAGE}.modeling_llada2_moe")


def load(modeling: types.ModuleType, folder: Path) -> torch.nn.Module:
    config = modeling.LLaDA2MoeConfig.from_pretrained(folder)
    model, info = modeling.LLaDA2MoeModelLM.from_pretrained(folder, config=config, torch_dtype=torch.float32,
                                                            attn_implementation="sdpa", output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise RuntimeError(f"checkpoint does not load into LLaDA2MoeModelLM: {problems}")
    for layer in model.model.layers:
        if type(layer.attention).__name__ != "LLaDA2MoeSdpaAttention":
            raise RuntimeError(f"attention is {type(layer.attention).__name__}, not the SDPA class")
        if isinstance(layer.mlp, modeling.LLaDA2MoeSparseMoeBlock) and not isinstance(layer.mlp.experts,
                                                                                        torch.nn.ModuleList):
            raise RuntimeError("experts are not one module per expert: not the released layout's path")
    return model.eval()


def block_mask(positions: torch.Tensor, block: int, rows: int) -> torch.Tensor:
    blocks = positions // block
    return (blocks[:, None, :] <= blocks[:, :, None])[:, None].expand(rows, 1, -1, -1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--cases", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from safetensors.torch import save_file

    torch.set_num_threads(2)
    stub_veomni()
    modeling = import_modeling(args.reference)
    model = load(modeling, args.checkpoint)

    calls = [0]
    infer = modeling.LLaDA2MoeSparseMoeBlock.moe_infer

    def counted(self, *a, **k):
        calls[0] += 1
        return infer(self, *a, **k)

    modeling.LLaDA2MoeSparseMoeBlock.moe_infer = counted
    routes: list[torch.Tensor] = []
    for module in model.modules():
        if isinstance(module, modeling.LLaDA2MoeGate):
            module.register_forward_hook(lambda _m, _i, out: routes.append(out[0].clone()))

    out: dict[str, torch.Tensor] = {}
    for case in json.loads(args.cases.read_text())["cases"]:
        ids = torch.tensor(case["input_ids"])
        positions = torch.arange(ids.shape[1])[None] if case.get("position_ids") is None else \
            torch.tensor(case["position_ids"])
        mask = None if case.get("block_length") is None else block_mask(positions, case["block_length"], len(ids))
        routes.clear()
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
        out[case["name"]] = logits.float().contiguous()
        for i, route in enumerate(routes):
            out[f"{case['name']}/route/{i}"] = route.contiguous()
    save_file(out, str(args.out), metadata={"moe_infer_calls": str(calls[0])})


if __name__ == "__main__":
    main()
