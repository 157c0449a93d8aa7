"""Peak bytes a row in flight costs outside the network, counted (not RSS): plain LLaDA and Dream streams and
Fast-dLLM v1's (prefix cache) at the released vocabulary sizes (LLaDA 126464, Dream 152064) and a 512-token canvas.

Every tensor an aten op returns is counted from its creation until the last tensor on its storage is freed; the
peak is read between ops outside the network's calls, so it holds what the decoder keeps and makes (the slot pools,
the logits the network returns, softmax, noise), not the network's weights or its activations inside a call. The
network is the real architecture at a tiny width with the released vocabulary: the LM head's rows and the decoder's
tensors are the released model's, the hidden layers are not (their activations are inside the calls anyway).

Each decoder runs its first ``--rounds`` rounds at each row count, twice: the LM head at the cells a step reads
(``read=``, what the native networks do) and the full head (a network without ``read``, what the stream did before:
logits over the whole canvas). Per row = (peak at N rows - peak at 1 row) / (N - 1). Counts with no target: they
are reported.

    python -m benchmarks row_memory [--rows 1 4] [--prompt 64] [--canvas 512] [--dtype bfloat16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import itertools
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from benchmarks.common.networks import tiny_network
from benchmarks.common.table import Table, columns
from benchmarks.common.verdict import Report
from models.decoders.dream import DreamConfig, dream_stream
from models.decoders.fastdllm.dream_sampler import FastDreamConfig, fastdllm_dream_stream
from models.decoders.fastdllm.llada_sampler import FastLLaDAConfig, fastdllm_llada_stream
from models.decoders.llada import LLaDAConfig, llada_stream
from models.decoders.sampling import row_seed

VOCAB = {"llada": 126464, "dream": 152064}


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages that aten ops returned and that a tracked tensor still holds, and their peak between
    ops outside the ``modules``' calls (hooks bracket the calls)."""

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage pointer -> [bytes, tracked tensors on it]
        self.tensors: set[int] = set()  # ids of the tensors tracked
        self.total = self.peak = self.depth = 0
        self.hooks = [hook for module in modules for hook in (
            module.register_forward_pre_hook(lambda *_: self._enter()),
            module.register_forward_hook(lambda *_: self._leave()))]

    def _enter(self) -> None:
        self.depth += 1

    def _leave(self) -> None:
        self.depth -= 1

    def _release(self, key: int, ident: int) -> None:
        self.tensors.discard(ident)
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.total -= entry[0]
            del self.live[key]

    def _track(self, tensor: torch.Tensor) -> None:
        if id(tensor) in self.tensors or tensor.device.type == "meta":
            return
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.live:
            self.live[key] = [storage.nbytes(), 0]
            self.total += storage.nbytes()
        self.live[key][1] += 1
        self.tensors.add(id(tensor))
        weakref.finalize(tensor, self._release, key, id(tensor))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._track(value)
        if not self.depth:
            self.peak = max(self.peak, self.total)
        return out

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for hook in self.hooks:
            hook.remove()


class FullHead(torch.nn.Module):
    """The network without ``read``: the decoder gets the logits of every position."""

    def __init__(self, network: torch.nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.network(*args, **kwargs)

    def new_cache(self, batch: int, capacity: int) -> Any:
        return self.network.new_cache(batch, capacity)


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # llada | dream: the network
    stream: Callable[..., Iterator[Any]]
    config: Callable[[int], Any]  # canvas -> config
    seeded: bool = False


def llada(canvas: int, **options: Any) -> LLaDAConfig:
    return LLaDAConfig(**{"gen_length": canvas, "steps": canvas, "block_length": 32, "mask_id": VOCAB["llada"] - 1,
                          "eos_id": 0, "eot_id": 1, **options})


def dream(canvas: int, **options: Any) -> DreamConfig:
    return DreamConfig(**{"max_new_tokens": canvas, "steps": canvas, "mask_id": VOCAB["dream"] - 1, "eos_ids": (0,),
                          **options})


CASES = [
    Case("llada greedy", "llada", llada_stream, llada),
    Case("llada T=0.8, row seeds", "llada", llada_stream, lambda canvas: llada(canvas, temperature=0.8), seeded=True),
    Case("dream entropy", "dream", dream_stream, dream),
    Case("fast-dllm llada, prefix cache", "llada", fastdllm_llada_stream,
         lambda canvas: FastLLaDAConfig(llada(canvas), cache="prefix")),
    Case("fast-dllm dream, prefix cache", "dream", fastdllm_dream_stream,
         lambda canvas: FastDreamConfig(dream(canvas, steps=canvas // 32), cache="prefix")),
]


def network_for(kind: str, dtype: torch.dtype) -> torch.nn.Module:
    return tiny_network(kind, VOCAB[kind], dtype=dtype, **({"max_sequence_length": 2048} if kind == "llada" else {}))


def peak(case: Case, network: torch.nn.Module, rows: int, prompt: int, canvas: int, rounds: int) -> int:
    """Peak live bytes of ``rounds`` rounds of ``rows`` rows in flight (one prompt per row)."""
    prompts = [torch.randint(2, VOCAB[case.kind] - 2, (prompt,), generator=torch.Generator().manual_seed(i))
               for i in range(rows)]
    seeds = tuple(row_seed(0, str(i)) for i in range(rows)) if case.seeded else None
    modules = [network] + ([network.network] if isinstance(network, FullHead) else [])
    with torch.inference_mode(), LiveBytes(modules) as counted:
        steps: Iterator[Any] = case.stream(network, prompts, case.config(canvas), rows, seeds)
        for _ in itertools.islice(steps, rounds):
            pass
        del steps
    return counted.peak


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, nargs=2, default=[1, 4], metavar=("ONE", "N"))
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--canvas", type=int, default=512)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", nargs="*", default=[c.name for c in CASES])


def run(args: argparse.Namespace, report: Report) -> None:
    torch.set_num_threads(1)
    one, many = args.rows
    print(f"peak bytes outside the network, counted; vocab LLaDA {VOCAB['llada']}, Dream {VOCAB['dream']}; prompt "
          f"{args.prompt}, canvas {args.canvas}, {args.dtype} network; per row = (peak at {many} - peak at {one}) / "
          f"{many - one}")
    table = Table(columns(("decoder", -1), ("LM head", -1), (f"peak, {one} row (MB)", 1),
                          (f"peak, {many} rows (MB)", 1), ("per row in flight (MB)", 1)), separator=" | ")
    print(f"| {table.header()} |")
    print("|---|---|---|---|---|")
    for case in (c for c in CASES if c.name in args.cases):
        network = network_for(case.kind, getattr(torch, args.dtype))
        for head, net in (("at the cells read", network), ("full canvas", FullHead(network))):
            small, large = (peak(case, net, rows, args.prompt, args.canvas, args.rounds) for rows in (one, many))
            per_row = (large - small) / (many - one)
            cells = [case.name, head, *(f"{value / 1e6:.0f}" for value in (small, large, per_row))]
            print(f"| {table.line(cells)} |", flush=True)
            report.info(f"{case.name}, LM head {head}: peak bytes at {one} row", small)
            report.info(f"{case.name}, LM head {head}: bytes per extra row in flight", per_row)
