"""What each decoder's step costs a GPU beyond the network, counted exactly: forwards, aten ops dispatched outside
network forwards per forward, and host reads per forward, at several batch sizes (harness/timing/op_count.py).

Counts, not times: they are the same on any machine, and they say how a decode behaves on a GPU, where every op
outside the forward is a kernel launch and every host read drains the queue. Each decoder decodes rotations of one
prompt on a tiny random native network (ReFusion's wrapped so 90% of its tokens pass verification, and once
unwrapped: never confident, every slot completed token by token); every row's
tokens at batch B are checked against the same row at the smallest batch size, so a batch changes no token.

Targets (the same as tests/models/decoders/test_step_ops.py checks): host reads per forward <= 2 at every batch size;
ops outside forwards per forward at batch 8 <= 2x batch 1, at batch 16 <= 2.5x.

    python benchmarks/step_ops.py [--batches 1 8 16] [--canvas 64] [--decoders ar llada ...]
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from fastdllm_modes import fastdllm_generate, mode_config
from harness.timing.op_count import OpCounter, StepCounts
from models.adapters.native import NetworkCalls
from models.decoders.ar import ARConfig, ar_generate
from models.networks.hf_causal import TransformersCausalLM
from models.decoders.block_diffusion import BlockDiffusionConfig, block_diffusion_generate
from models.decoders.dream import DreamConfig, dream_generate
from models.decoders.llada import LLaDAConfig, llada_generate
from models.decoders.refusion.decoder import RefusionConfig, refusion_decode_rows
from models.networks.dream import tiny_dream_config
from models.networks.llada import tiny_llada_config
from models.networks.llada2 import tiny_llada2_config
from models.networks.loading import build_network
from models.networks.qwen3 import Qwen3NetworkConfig
from refusion_cases import biased

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


SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)


def qwen3() -> Qwen3NetworkConfig:
    return Qwen3NetworkConfig(**SHAPE)


def transformers_qwen3() -> torch.nn.Module:
    """The AR baseline runs on transformers' network, as the harness's AR adapter does."""
    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(**SHAPE, max_position_embeddings=4096)).eval()


NETWORKS: dict[str, Callable[[], torch.nn.Module]] = {
    "transformers-qwen3": transformers_qwen3,
    "qwen3": lambda: build_network(qwen3(), seed=0),
    "refusion": lambda: biased(build_network(qwen3(), seed=0), "90%", 4096, VOCAB, MASK),
    "refusion-unsure": lambda: biased(build_network(qwen3(), seed=0), "random", 4096, VOCAB, MASK),
    "llada": lambda: build_network(dataclasses.replace(tiny_llada_config(VOCAB), d_model=64, n_layers=2,
                                                       mlp_hidden_size=128), seed=0),
    "dream": lambda: build_network(dataclasses.replace(tiny_dream_config(VOCAB), hidden_size=64, num_hidden_layers=2,
                                                       intermediate_size=128), seed=0),
    "llada2": lambda: build_network(dataclasses.replace(tiny_llada2_config(VOCAB), hidden_size=64,
                                                        num_hidden_layers=2, intermediate_size=128,
                                                        moe_intermediate_size=32, head_dim=16), seed=0),
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
class Row:
    case: str
    batch: int
    counts: StepCounts

    @property
    def ops(self) -> float:
        return self.counts.per_forward()[0]

    @property
    def reads(self) -> float:
        return self.counts.per_forward()[1]


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
            rows.append(Row(case.name, batch, counts))
    return rows


def verdicts(rows: list[Row]) -> list[str]:
    """One FAIL line per broken target (empty when all hold)."""
    failures = []
    base = {r.case: r for r in rows if r.batch == 1}
    for r in rows:
        if r.reads > READS_PER_FORWARD:
            failures.append(f"{r.case} batch {r.batch}: {r.reads:.2f} host reads per forward "
                            f"(target <= {READS_PER_FORWARD}): {dict(r.counts.reads)}")
        limit = OPS_GROWTH.get(r.batch)
        if limit is not None and r.case in base and r.ops > limit * base[r.case].ops:
            failures.append(f"{r.case} batch {r.batch}: {r.ops:.1f} ops per forward outside forwards, "
                            f"{r.ops / base[r.case].ops:.2f}x batch 1 (target <= {limit}x)")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--canvas", type=int, default=64)
    parser.add_argument("--decoders", nargs="+", default=[c.name for c in CASES],
                        choices=[c.name for c in CASES], metavar="NAME")
    parser.add_argument("--top", type=int, default=0, help="also list each row's N most frequent ops and reads")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = measure([c for c in CASES if c.name in args.decoders], args.batches, args.canvas)
    print(f"# ops outside network forwards and host reads, per forward (canvas {args.canvas}, prompt {PROMPT}, "
          f"tiny random networks; tokens checked equal across batch sizes)")
    print(f"{'decoder':<28} {'batch':>5} {'forwards':>8} {'ops/fwd':>8} {'x b1':>5} {'reads/fwd':>9} "
          f"{'reads in fwd':>12}")
    base = {r.case: r for r in rows if r.batch == args.batches[0]}
    for r in rows:
        inside = sum(r.counts.reads_inside.values()) / max(r.counts.forwards, 1)
        print(f"{r.case:<28} {r.batch:>5} {r.counts.forwards:>8} {r.ops:>8.1f} {r.ops / base[r.case].ops:>5.2f} "
              f"{r.reads:>9.2f} {inside:>12.2f}")
        if args.top:
            print(f"    ops: {r.counts.ops.most_common(args.top)}\n    reads: {dict(r.counts.reads)}")
    failures = verdicts(rows)
    for line in failures:
        print("FAIL", line)
    print("PASS every target" if not failures else f"{len(failures)} target(s) missed")


if __name__ == "__main__":
    main()
