"""What each decoder's step costs a GPU beyond the network, counted exactly: forwards, aten ops dispatched outside
network forwards per forward, and host reads per forward, at several batch sizes (harness/timing/op_count.py).

Counts, not times: they are the same on any machine, and they say how a decode behaves on a GPU, where every op
outside the forward is a kernel launch and every host read drains the queue. Each decoder decodes rotations of one
prompt on a tiny random native network (ReFusion's wrapped so 90% of its tokens pass verification, and once
unwrapped: never confident, every slot completed token by token); every row's
tokens at batch B are checked against the same row at the smallest batch size, so a batch changes no token.

Targets (the same as tests/models/decoders/test_step_ops.py checks): host reads per forward <= 2 at every batch size;
ops outside forwards per forward at batch 8 <= 2x batch 1, at batch 16 <= 2.5x.

    python -m benchmarks step_ops [--batches 1 8 16] [--canvas 64] [--decoders ar llada ...]
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from benchmarks.common.counts import Counted
from benchmarks.common.fastdllm_modes import fastdllm_generate, mode_config
from benchmarks.common.networks import tiny_network, transformers_qwen3
from benchmarks.common.regimes import biased
from benchmarks.common.table import Table, columns
from benchmarks.common.verdict import Report
from harness.timing.op_count import OpCounter, StepCounts
from models.adapters.native import NetworkCalls
from models.decoders.ar import ARConfig, ar_generate
from models.decoders.block_diffusion import BlockDiffusionConfig, block_diffusion_generate
from models.decoders.dream import DreamConfig, dream_generate
from models.decoders.llada import LLaDAConfig, llada_generate
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_rows
from models.networks.hf_causal import TransformersCausalLM

VOCAB, PROMPT = 256, 16
MASK, NO_EOS = VOCAB - 1, VOCAB  # an end-of-sequence id the network cannot produce: canvases fill completely
READS_PER_FORWARD = 2.0
OPS_GROWTH = {8: 2.0, 16: 2.5}  # ops per forward at batch B over batch 1

# decode(network, prompts [B, P], canvas) -> generated ids per row
Decode = Callable[[torch.nn.Module, torch.Tensor, int], list[list[int]]]


@dataclass(frozen=True)
class Case:
    name: str
    network: str  # a key of NETWORKS
    decode: Decode
    blocks: bool = False  # the block-diffusion decoder (it calls the network's ``block_forward``)


HIDDEN, LAYERS, MLP = 64, 2, 128


def native(kind: str) -> torch.nn.Module:
    return tiny_network(kind, VOCAB, HIDDEN, LAYERS, MLP)


NETWORKS: dict[str, Callable[[], torch.nn.Module]] = {
    # the AR baseline runs on transformers' network, as the harness's AR adapter does
    "transformers-qwen3": lambda: transformers_qwen3(VOCAB, HIDDEN, LAYERS, MLP, max_positions=4096),
    "qwen3": lambda: native("qwen3"),
    "refusion": lambda: biased(native("qwen3"), "90%", 4096, VOCAB, MASK),
    "refusion-unsure": lambda: biased(native("qwen3"), "random", 4096, VOCAB, MASK),
    "llada": lambda: native("llada"),
    "dream": lambda: native("dream"),
    "llada2": lambda: native("llada2"),
}


def rows_of(output) -> list[list[int]]:
    return [list(r.token_ids) for r in output.rows]


def ar(network, prompts, canvas):
    return rows_of(ar_generate(TransformersCausalLM(network), prompts, None,
                               ARConfig(max_new_tokens=canvas, eos_ids=(NO_EOS,), pad_id=0)))


def llada(network, prompts, canvas):
    cfg = LLaDAConfig(gen_length=canvas, steps=canvas // 2, block_length=32, mask_id=MASK, eos_id=NO_EOS,
                      eot_id=NO_EOS + 1)
    return rows_of(llada_generate(network, prompts, None, cfg))


def dream(network, prompts, canvas):
    cfg = DreamConfig(max_new_tokens=canvas, steps=canvas // 2, mask_id=MASK, eos_ids=(NO_EOS,))
    return rows_of(dream_generate(network, prompts, None, cfg))


def fastdllm(kind: str, mode: str) -> Decode:
    ids = {"mask_id": MASK} | ({"eos_ids": (NO_EOS,)} if kind == "dream" else {"eos_id": NO_EOS, "eot_id": NO_EOS + 1})

    def decode(network, prompts, canvas):
        return rows_of(fastdllm_generate(network, prompts, None, mode_config(kind, mode, canvas, 32, **ids)))

    return decode


def refusion(network, prompts, canvas):
    cfg = RefusionConfig(gen_length=canvas, slot_size=8, serial_num_blocks=max(canvas // 64, 1), mask_id=MASK,
                         eos_id=NO_EOS)
    return [t.token_ids for t in refusion_decode_rows(network, list(prompts), cfg)]


def block(name: str, network: str, cfg: BlockDiffusionConfig) -> Case:
    def decode(network, prompts, canvas):
        filled = dataclasses.replace(cfg, gen_length=canvas, mask_id=MASK, eos_ids=(NO_EOS,))
        return rows_of(block_diffusion_generate(network, prompts, None, filled))

    return Case(name, network, decode, blocks=True)


CASES = [
    Case("ar", "transformers-qwen3", ar),
    Case("llada", "llada", llada),
    Case("dream", "dream", dream),
    *(Case(f"fastdllm-{kind} {mode}", kind, fastdllm(kind, mode))
      for kind in ("llada", "dream") for mode in ("prefix", "dual", "dual+parallel")),
    Case("refusion", "refusion", refusion),
    Case("refusion never confident", "refusion-unsure", refusion),  # every slot completed token by token
    block("sdar static", "qwen3", BlockDiffusionConfig(block_length=4, denoising_steps=4, temperature=0)),
    block("trado dynamic", "qwen3", BlockDiffusionConfig(block_length=4, denoising_steps=4, temperature=0,
                                                              remasking="low_confidence_dynamic",
                                                              confidence_threshold=0.9)),
    block("fastdllm-v2", "dream", BlockDiffusionConfig(block_length=32, sub_block_length=8, temperature=0,
                                                            remasking="threshold_plus_best", logit_shift=True,
                                                            confidence_threshold=0.9, first_token_from_commit=True,
                                                            commit_finished_block=False)),
    block("llada2", "llada2", BlockDiffusionConfig(block_length=32, denoising_steps=32, temperature=0,
                                                        remasking="low_confidence_dynamic", confidence_threshold=0.95,
                                                        fused_commit=True, eos_early_stop=True)),
]


def prompts_for(batch: int) -> torch.Tensor:
    """``batch`` rotations of one seeded prompt (same length: no padding, so every row is the same work)."""
    prompt = torch.randint(0, VOCAB - 2, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    return torch.cat([prompt.roll(i, dims=1) for i in range(batch)])


def count(case: Case, network: torch.nn.Module, batch: int, canvas: int) -> tuple[StepCounts, list[list[int]]]:
    """One decode, counted. The block decoder's ``block_forward`` is a method, so it goes through a module call (as
    the adapters route it) for its calls to be seen as forwards."""
    if case.blocks:
        network = NetworkCalls(network)
    prompts = prompts_for(batch)
    with torch.inference_mode(), OpCounter(network) as counts:
        tokens = case.decode(network, prompts, canvas)
    return counts, tokens


@dataclass(frozen=True)
class Row(Counted):
    case: str
    batch: int


def measure(cases: list[Case], batches: list[int], canvas: int) -> list[Row]:
    """Every case at every batch size; raises if a row's tokens differ from the same row at the first batch size."""
    rows = []
    networks: dict[str, torch.nn.Module] = {}
    for case in cases:
        network = networks.setdefault(case.network, NETWORKS[case.network]())
        seen: list[list[int]] = []  # each row's tokens at the smallest batch that held it
        for batch in batches:
            counts, tokens = count(case, network, batch, canvas)
            if tokens[: len(seen)] != seen:
                raise RuntimeError(f"{case.name}: batch {batch} changed the tokens of a row decoded at a smaller batch")
            seen += tokens[len(seen):]
            rows.append(Row(counts=counts, case=case.name, batch=batch))
    return rows


def verdicts(rows: list[Row]) -> list[str]:
    """One FAIL line per broken target (empty when all hold)."""
    failures = []
    base = {r.case: r for r in rows if r.batch == 1}
    for r in rows:
        if r.reads_per_call > READS_PER_FORWARD:
            failures.append(f"{r.case} batch {r.batch}: {r.reads_per_call:.2f} host reads per forward "
                            f"(target <= {READS_PER_FORWARD}): {dict(r.counts.reads)}")
        limit = OPS_GROWTH.get(r.batch)
        if limit is not None and r.case in base and r.ops_per_call > limit * base[r.case].ops_per_call:
            failures.append(f"{r.case} batch {r.batch}: {r.ops_per_call:.1f} ops per forward outside forwards, "
                            f"{r.ops_per_call / base[r.case].ops_per_call:.2f}x batch 1 (target <= {limit}x)")
    return failures


TABLE = Table(columns(("decoder", -28), ("batch", 5), ("forwards", 8), ("ops/fwd", 8), ("x b1", 5), ("reads/fwd", 9),
                      ("reads in fwd", 12)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--canvas", type=int, default=64)
    parser.add_argument("--decoders", nargs="+", default=[c.name for c in CASES],
                        choices=[c.name for c in CASES], metavar="NAME")
    parser.add_argument("--top", type=int, default=0, help="also list each row's N most frequent ops and reads")


def run(args: argparse.Namespace, report: Report) -> None:
    torch.set_num_threads(1)
    rows = measure([c for c in CASES if c.name in args.decoders], args.batches, args.canvas)
    print(f"# ops outside network forwards and host reads, per forward (canvas {args.canvas}, prompt {PROMPT}, "
          f"tiny random networks; tokens checked equal across batch sizes)")
    TABLE.print_header()
    base = {r.case: r for r in rows if r.batch == args.batches[0]}
    for r in rows:
        TABLE.print_row(r.case, r.batch, r.counts.forwards, f"{r.ops_per_call:.1f}",
                        f"{r.ops_per_call / base[r.case].ops_per_call:.2f}", f"{r.reads_per_call:.2f}",
                        f"{r.reads_inside_per_call:.2f}")
        if args.top:
            print(f"    ops: {r.counts.ops.most_common(args.top)}\n    reads: {dict(r.counts.reads)}")
    failures = verdicts(rows)
    report.check("host reads per forward, the most of any decoder and batch", max(r.reads_per_call for r in rows), "<=",
                 READS_PER_FORWARD)
    one = {r.case: r for r in rows if r.batch == 1}
    for batch, limit in OPS_GROWTH.items():
        grown = [r.ops_per_call / one[r.case].ops_per_call for r in rows if r.batch == batch and r.case in one]
        if grown:
            report.check(f"ops per forward at batch {batch} over batch 1, the most of any decoder", max(grown), "<=",
                         limit)
    for line in failures:
        print("FAIL", line)
    print("PASS every target" if not failures else f"{len(failures)} target(s) missed")
