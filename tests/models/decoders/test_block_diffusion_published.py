"""The block-diffusion decoder against the published decoding functions themselves, token for token and forward for
forward: JetAstra/SDAR ``generate.py`` (``block_diffusion_generate``) and NVlabs/Fast-dLLM
``v2/generation_functions.py`` (``batch_sample``).

The published code runs in its own environment through benchmarks/reference/block_diffusion_reference.py, on the same tiny
checkpoint (tiny-sdar, tiny-fastdllm-v2) in float32 on the CPU; the project side is ``block_diffusion_generate`` on
the native network. The environment is ReFusion's (docs/benchmarks.md), which serves both:
``python3 -m venv REFENV && REFENV/bin/pip install torch==2.13.0 transformers==4.52.4 numpy pandas tqdm``. Set
SDAR_REFERENCE_DIR (a checkout of JetAstra/SDAR), FASTDLLM_V2_REFERENCE_DIR (a checkout of NVlabs/Fast-dLLM with
the v2 of upstream commit d259b48 or later, or its v2/ folder) and BLOCK_DIFFUSION_REFERENCE_PYTHON (REFENV's
Python); without them these tests skip.

**The stand-in network.** Both remote modeling files import flash-attn, so the worker drives the published functions
with transformers' own Qwen3ForCausalLM / Qwen2ForCausalLM behind a wrapper implementing the modeling file's
contract. What was checked by reading the modeling files (Gen-Verse/dLLM-RL ``models/sdar/modeling_sdar.py``, and
its commented-out original SDAR path; a public copy of Fast-dLLM v2's remote ``modeling.py``):

* SDAR: the attention takes the caller's mask as given over [cache; block] (nonzero = visible; the original path
  runs flash-attn without a mask when everything is visible, else SDPA with it) and adds no causal mask of its own
  (``is_causal=False``). The published loop passes rows of a block-lower-triangular mask, so *inside a block* every
  query sees the whole block, *across blocks* a block sees every earlier block (the cache) and nothing later, and
  the *prefill* of the prompt's whole blocks is block-causal too. Positions are the caller's ``position_ids``.
  ``store_kv`` appends the block's K/V; otherwise the cache is read and left as it was. The wrapper hands the same
  mask to transformers' Qwen3 (4-D, additive), lets it append, and crops the cache back without ``store_kv``.
* Fast-dLLM v2: in eval the model ignores any caller mask and builds ``eval_mask``: query i, at ``cache length +
  i``, sees key j when ``(cache length + i) // block_size >= j // block_size``, so again the whole block, every
  cached block, and a block-causal prefill; positions are ``cache length + i``; ``update_past_key_values`` appends
  the block to the cache, otherwise cache and block are concatenated for attention only. ``block_size`` defaults to
  32 where the caller omits it (the published peeks do); the wrapper keeps that default. The cache is a
  transformers 4.52.4 ``DynamicCache`` (the function edits its ``key_cache``/``value_cache`` lists to drop finished
  rows), and ``sample_with_top_p`` at temperature 0 is (argmax, softmax).
* Executed check: every forward's logits are compared in the worker with a cache-free forward of the tokens the
  cache holds plus the block under the block-causal mask; each equality case asserts the largest difference is
  below 1e-4 (about 2e-6 for SDAR, 0 for v2 here; a wrong block size in that recompute gives differences near 9).

**Cases compared for equality** (tokens up to the first end-of-sequence id, or the whole canvas, and forwards):
SDAR's low_confidence_static, low_confidence_dynamic and sequential, with SDAR's greedy (temperature 1, top_k 1; a
greedy batch also gives each row its batch-1 tokens) and seeded sampling (temperature 1; 0.8 and 0.5 with top_p
0.9, the last committing several masks a step) with the same draws (the worker calls ``torch.manual_seed(seed)``
right before the published function; the decoder's one generator is seeded with the config's seed), prompts not
aligned to the block and aligned, block 4 with 4 and 2 steps and block 8 with 4, and an end of sequence that stops
the decode inside a block, blocks before the canvas ends. Fast-dLLM v2 with its settings (block 32, sub-block 8,
threshold 0.9 and 1, and 0.02 to commit several a step, temperature 0): a prompt shorter than a block, longer and
unaligned, longer and aligned (first token from the prefill), right-padded batches of prompts of different lengths
within one block and across blocks, and a batch in which every row ends at an end of sequence. batch_sample decodes
``max_new_tokens // block + longest prompt // block`` whole blocks; ``v2_max_new_tokens`` picks the max_new_tokens
that ends it on the decoder's last block.

**Published defects the decoder fixes, each in its own test here and in no equality case:** SDAR's
``entropy_bounded`` cannot run (``transfer_index`` is read before it is assigned; its entropy is also summed over the
block axis of the chosen tokens' probabilities, not over the vocabulary); SDAR's top-k over every position
overwrites prompt or committed tokens once fewer masks remain than the step's count; v2 skips the prefill of a
prompt exactly one block long; v2 gives a batch row whose prompt ends on a block boundary (neither the shortest nor
the longest) its first token from a peek instead of the commit pass; v2 does not notice an end of sequence written
by the commit pass; v2 crashes when every row of a batch without a prefill finishes in the first block.

The tiny Fast-dLLM v2 network proposes the mask id itself at some prompts; committing it leaves the mask in place,
and both the published loop and the decoder then never finish the block. Both sides stop after FORWARD_LIMIT
forwards, and the prompts here are ones where neither does (except the one-block prompt, whose published decode has
no context at all and stalls: that test accepts it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from models.decoders.block_diffusion import BlockDiffusionConfig, block_diffusion_generate
from models.decoders.contract import cut_after_eos
from models.networks.loading import load_network
from models.tiny import materialize

WORKER = Path(__file__).resolve().parents[3] / "benchmarks" / "reference" / "block_diffusion_reference.py"
NO_EOS = 10**6  # an id no tiny model emits: decode the whole canvas
EARLY, COMMIT, FIRST_BLOCK = -1, -2, -3  # Case.eos: an id found on the decoder's output (Side.find_eos)
FORWARD_LIMIT = 500  # both sides stop a decode that stalls (a network proposing the mask id loops forever)


def prompt(seed: int, length: int) -> list[int]:
    """Ordinary-token ids (the tiny tokenizers' specials sit below 20)."""
    rng = random.Random(seed * 1000 + length)
    return [rng.randrange(20, 500) for _ in range(length)]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    prompts: tuple[tuple[int, ...], ...]
    settings: dict[str, Any]  # BlockDiffusionConfig fields other than the token ids
    eos: int | None = None  # None: the whole canvas


def case(name: str, prompts: list[list[int]], eos: int | None = None, **settings: Any) -> Case:
    return Case(name, tuple(map(tuple, prompts)), settings, eos)


# ---- SDAR --------------------------------------------------------------------------------------------------------
SDAR = dict(gen_length=16, block_length=4, denoising_steps=4, logit_shift=False, first_token_from_commit=False,
            commit_finished_block=True)
GREEDY = dict(temperature=1.0, top_k=1)  # SDAR's own greedy: its sampler divides by the temperature
UNALIGNED, ALIGNED = prompt(1, 7), prompt(1, 8)
SDAR_CASES = [
    case("static-greedy", [UNALIGNED, ALIGNED], **SDAR, **GREEDY, remasking="low_confidence_static"),
    case("dynamic-greedy", [UNALIGNED, ALIGNED], **SDAR, **GREEDY, remasking="low_confidence_dynamic"),
    case("sequential-greedy", [UNALIGNED, ALIGNED], **SDAR, **GREEDY, remasking="sequential"),
    case("sequential-2-steps", [UNALIGNED, ALIGNED], **{**SDAR, "denoising_steps": 2}, **GREEDY,
         remasking="sequential"),
    case("static-sampled", [UNALIGNED, ALIGNED], **SDAR, temperature=1.0, top_k=0, seed=3,
         remasking="low_confidence_static"),
    case("dynamic-sampled-top-p", [UNALIGNED, ALIGNED], **SDAR, temperature=0.8, top_p=0.9, seed=5,
         remasking="low_confidence_dynamic", confidence_threshold=0.3),
    case("dynamic-sampled-cold", [UNALIGNED, ALIGNED], **SDAR, temperature=0.5, top_p=0.9, seed=5,
         remasking="low_confidence_dynamic", confidence_threshold=0.03),
    case("static-block-8-steps-4", [prompt(2, 16)], **{**SDAR, "gen_length": 24, "block_length": 8}, temperature=1.0,
         top_k=0, seed=7, remasking="low_confidence_static"),
    case("static-eos", [prompt(3, 6)], eos=EARLY, **{**SDAR, "gen_length": 32}, **GREEDY,
         remasking="low_confidence_static"),
]
SDAR_DEFECTS = [
    case("entropy-bounded", [UNALIGNED], **SDAR, **GREEDY, remasking="entropy_bounded", eb_threshold=0.35),
    case("static-2-steps-unaligned", [UNALIGNED], **{**SDAR, "denoising_steps": 2}, **GREEDY,
         remasking="low_confidence_static"),
    case("dynamic-block-8-steps-4", [prompt(2, 16)], **{**SDAR, "gen_length": 24, "block_length": 8},
         temperature=0.5, top_k=0, seed=7, remasking="low_confidence_dynamic", confidence_threshold=0.03),
]

# ---- Fast-dLLM v2 ------------------------------------------------------------------------------------------------
V2 = dict(gen_length=64, block_length=32, sub_block_length=8, denoising_steps=32, remasking="threshold_plus_best",
          confidence_threshold=0.9, temperature=0.0, logit_shift=True, first_token_from_commit=True,
          commit_finished_block=False)
V2_CASES = [
    case("short", [prompt(2, 5)], **V2),
    case("unaligned-prefill", [prompt(1, 40)], **V2),
    case("aligned-prefill", [prompt(1, 64)], **V2),
    case("threshold-1", [prompt(1, 12)], **{**V2, "confidence_threshold": 1.0}),
    case("threshold-0.02", [prompt(1, 12)], **{**V2, "confidence_threshold": 0.02}),  # several commits a step
    case("batch-one-block", [prompt(2, 5), prompt(1, 12), prompt(2, 27)], **V2),
    case("batch-eos", [prompt(1, 40), prompt(1, 70), prompt(1, 50)], eos=EARLY, **V2),
    case("batch-span", [prompt(1, 40), prompt(1, 70), prompt(1, 50)], **V2),
]
V2_DEFECTS = [
    case("one-block-prompt", [prompt(1, 32)], **V2),
    case("row-on-block-boundary", [prompt(1, 40), prompt(1, 64), prompt(1, 70)], **V2),
    case("row-on-block-boundary-alone", [prompt(1, 64)], **V2),
    case("eos-from-commit", [prompt(2, 12)], eos=COMMIT, **V2),
    case("all-finish-first-block", [prompt(2, 5), prompt(1, 12)], eos=FIRST_BLOCK, **V2),
]


# ---- the two sides -----------------------------------------------------------------------------------------------
class Limited:
    """The native network with a bound on its forwards (the decoder calls only these two methods)."""

    def __init__(self, network: Any) -> None:
        self.network, self.forwards = network, 0
        self.fed: list[tuple[int, int, bool]] = []  # per forward: first position, width, whether it writes

    def new_cache(self, *args: Any) -> Any:
        return self.network.new_cache(*args)

    def block_forward(self, ids: torch.Tensor, positions: range, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.forwards += 1
        self.fed.append((positions.start, ids.shape[1], bool(args[-1])))
        if self.forwards > FORWARD_LIMIT:
            raise RuntimeError(f"more than {FORWARD_LIMIT} forwards: the decode stalled")
        return self.network.block_forward(ids, positions, *args, **kwargs)


def harness(network: Any, prompts: tuple[tuple[int, ...], ...], cfg: BlockDiffusionConfig, fed: list | None = None):
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    limited = Limited(network)
    out = block_diffusion_generate(limited, ids, mask, cfg)
    if fed is not None:
        fed.extend(limited.fed)
    return out


def v2_max_new_tokens(c: Case) -> int:
    """batch_sample decodes ``max_new_tokens // block + longest prompt // block`` whole blocks; the decoder's last
    block is the one holding the longest row's last canvas token. This makes them the same block."""
    block, longest = c.settings["block_length"], max(map(len, c.prompts))
    return c.settings["gen_length"] + (block if longest % block else 0)


def reference_case(kind: str, c: Case, mask_id: int, eos: int | None, pad_id: int) -> dict[str, Any]:
    """The case as the worker reads it: the published function's own arguments."""
    s = c.settings
    common = dict(name=c.name, prompts=[list(p) for p in c.prompts], mask_id=mask_id, max_forwards=FORWARD_LIMIT)
    if kind == "sdar":
        return dict(common, seed=s.get("seed", 0), gen_length=s["gen_length"], block_length=s["block_length"],
                    denoising_steps=s["denoising_steps"], temperature=s["temperature"], top_k=s.get("top_k", 0),
                    top_p=s.get("top_p", 1.0), remasking_strategy=s["remasking"],
                    confidence_threshold=s.get("confidence_threshold", 0.85),
                    eb_threshold=s.get("eb_threshold", 0.35), stopping_criteria_idx=None if eos is None else [eos])
    return dict(common, pad_id=pad_id, block_size=s["block_length"], small_block_size=s["sub_block_length"],
                max_new_tokens=v2_max_new_tokens(c), threshold=s["confidence_threshold"],
                stop_token=NO_EOS if eos is None else eos, temperature=0.0, top_p=1.0)


class Side:
    """One reference: the checkpoint, its native network, its ids, and the worker's answers for every case."""

    def __init__(self, kind: str, recipe: str, mask_token: str, cases: list[Case], checkout: str, python: str,
                 tmp: Path) -> None:
        from transformers import AutoTokenizer

        self.kind, self.folder = kind, materialize(recipe)
        tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.mask_id = tokenizer.convert_tokens_to_ids(mask_token)
        self.pad_id = tokenizer.pad_token_id
        self.network = load_network(self.folder, kind, dtype=torch.float32, device="cpu")
        self.eos = {c.name: self.find_eos(c) if c.eos is not None and c.eos < 0 else c.eos for c in cases}
        path = tmp / f"{kind}-cases.json"
        path.write_text(json.dumps({"cases": [reference_case(kind, c, self.mask_id, self.eos[c.name], self.pad_id)
                                              for c in cases]}))
        out = tmp / f"{kind}-answers.json"
        done = subprocess.run([python, str(WORKER), kind, f"--reference={checkout}", f"--checkpoint={self.folder}",
                               f"--cases={path}", f"--out={out}"], capture_output=True, text=True, timeout=1800)
        if done.returncode:
            pytest.fail(f"the published {kind} decoder did not run: {done.stderr.strip().splitlines()[-1:]}")
        self.answers = {a["name"]: a["runs"] for a in json.loads(out.read_text())["cases"]}

    def config(self, c: Case, eos: int | None) -> BlockDiffusionConfig:
        return BlockDiffusionConfig(mask_id=self.mask_id, eos_ids=(NO_EOS if eos is None else eos,), **c.settings)

    def decode(self, c: Case, prompts=None, eos: int | None | str = "case", fed: list | None = None):
        eos = self.eos[c.name] if eos == "case" else eos
        return harness(self.network, prompts or c.prompts, self.config(c, eos), fed)

    def find_eos(self, c: Case) -> int:
        """An id to end the sequence with, read off the decoder's own decode of the whole canvas (which the
        comparison then checks against the published one). ``c.eos`` says where it must first occur in every row:
        EARLY, before the row's last block, at a position a peek committed; COMMIT, at a position the commit pass
        wrote (a block's first token); FIRST_BLOCK, inside the first block decoded."""
        rows = self.decode(c, eos=None).tokens.tolist()
        gen, block = c.settings["gen_length"], c.settings["block_length"]
        starts = [len(p) for p in c.prompts]
        from_commit = c.settings.get("first_token_from_commit", False)

        def wanted(i: int, start: int) -> bool:
            at_block_start = from_commit and (start + i) % block == 0
            if c.eos == COMMIT:
                return at_block_start
            if c.eos == FIRST_BLOCK:
                return (start + i) // block == start // block and not at_block_start
            return (start + i) // block < (start + gen - 1) // block and not at_block_start

        candidates = None
        for row, start in zip(rows, starts):
            firsts: dict[int, int] = {}
            for i, t in enumerate(row):
                firsts.setdefault(t, i)
            fits = {t: i for t, i in firsts.items() if wanted(i, start) and t != self.mask_id}
            candidates = fits if candidates is None else {t: max(i, candidates[t]) for t, i in fits.items()
                                                          if t in candidates}
        assert candidates, f"{c.name}: no id ends every row where the case needs it"
        if c.eos == EARLY:  # the latest such stop: the most blocks decoded before it
            return max(candidates, key=lambda t: (candidates[t], -t))
        return min(candidates, key=lambda t: (candidates[t], t))


def reference_env(variable: str, what: str) -> tuple[str, str]:
    checkout, python = os.environ.get(variable), os.environ.get("BLOCK_DIFFUSION_REFERENCE_PYTHON")
    if not checkout or not python:
        pytest.skip(f"set {variable} (a checkout of {what}) and BLOCK_DIFFUSION_REFERENCE_PYTHON (a Python with torch "
                    "and transformers 4.52.4, docs/decoders.md §9) to compare with the published decoder")
    return checkout, python


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    checkout, python = reference_env("SDAR_REFERENCE_DIR", "JetAstra/SDAR")
    return Side("sdar", "tiny-sdar", "<|MASK|>", SDAR_CASES + SDAR_DEFECTS, checkout, python,
                tmp_path_factory.mktemp("sdar"))


@pytest.fixture(scope="module")
def v2(tmp_path_factory):
    checkout, python = reference_env("FASTDLLM_V2_REFERENCE_DIR", "NVlabs/Fast-dLLM")
    return Side("fastdllm-v2", "tiny-fastdllm-v2", "|<MASK>|", V2_CASES + V2_DEFECTS, checkout, python,
                tmp_path_factory.mktemp("fastdllm-v2"))


def published_rows(side: Side, c: Case, run: dict[str, Any]) -> list[list[int]]:
    """The reference's rows as the decoder reports them: the canvas, cut after the first end of sequence."""
    assert run["error"] is None, run["error"]
    assert run["max_logit_error"] < 1e-4, "the stand-in's logits differ from a full block-causal recompute"
    assert run["overwrites"] == 0, "a published top-k overwrote a committed token: not an equality case"
    eos = side.eos[c.name]
    return [cut_after_eos(row[:c.settings["gen_length"]], [NO_EOS if eos is None else eos])[0]
            for row in run["tokens"]]


# ---- equality ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("c", SDAR_CASES, ids=[c.name for c in SDAR_CASES])
def test_sdar_tokens_and_forwards_equal_the_published_decoders(sdar, c):
    runs = sdar.answers[c.name]
    for p, run in zip(c.prompts, runs):  # the published function decodes one prompt at a time
        out = sdar.decode(c, prompts=(p,))
        assert [out.rows[0].token_ids] == published_rows(sdar, c, run), f"prompt of {len(p)}"
        assert out.nfe == run["forwards"], f"prompt of {len(p)}"
        if c.eos is not None:  # it really stopped early: the canvas's last block was never decoded
            assert not out.rows[0].hit_max_tokens and run["tokens"][0][-1] == sdar.mask_id
    if c.settings.get("top_k") == 1:  # greedy: a batch gives every row its batch-1 tokens
        batch = sdar.decode(c)
        assert [r.token_ids for r in batch.rows] == [published_rows(sdar, c, run)[0] for run in runs]


@pytest.mark.parametrize("c", V2_CASES, ids=[c.name for c in V2_CASES])
def test_fastdllm_v2_tokens_and_forwards_equal_the_published_decoders(v2, c):
    (run,) = v2.answers[c.name]  # the published function decodes the whole batch
    out = v2.decode(c)
    assert all(len(row) >= c.settings["gen_length"] or c.eos is not None for row in run["tokens"])
    assert [r.token_ids for r in out.rows] == published_rows(v2, c, run)
    assert out.nfe == run["forwards"]
    if c.eos is not None:  # every row really stopped early
        assert not any(r.hit_max_tokens for r in out.rows)
        assert all(len(row) < c.settings["gen_length"] for row in run["tokens"])


# ---- published defects the decoder fixes -------------------------------------------------------------------------
def defect(side: Side, name: str) -> tuple[Case, list[dict[str, Any]]]:
    c = next(c for c in SDAR_DEFECTS + V2_DEFECTS if c.name == name)
    return c, side.answers[name]


def test_sdar_entropy_bounded_does_not_run_in_the_published_code(sdar):
    """generate.py assigns ``transfer_index`` in every branch but entropy_bounded's, which then writes into it."""
    c, (run,) = defect(sdar, "entropy-bounded")
    assert run["error"] is not None and run["error"].startswith("UnboundLocalError")
    assert "transfer_index" in run["error"]
    out = sdar.decode(c)  # the decoder's entropy over the vocabulary per position runs
    assert len(out.rows[0].token_ids) == c.settings["gen_length"]


@pytest.mark.parametrize("name", ["static-2-steps-unaligned", "dynamic-block-8-steps-4"])
def test_sdar_published_top_k_overwrites_tokens_that_are_no_longer_masks(sdar, name):
    """Once fewer masks remain than the step's count (two a step and a prompt block holding one mask; or a dynamic
    step that committed more than its count), the published top-k also picks non-masks (confidence -inf) and
    overwrites a prompt or committed token with that step's proposal. The decoder caps the count at the masks."""
    c, (run,) = defect(sdar, name)
    assert run["error"] is None and run["overwrites"] > 0
    assert len(sdar.decode(c).rows[0].token_ids) == c.settings["gen_length"]


def test_fastdllm_v2_prompt_of_exactly_one_block_gets_no_prefill(v2):
    """``if min_len > block_size`` skips the prefill when the prompt is exactly one block, then starts at block 1 on
    an empty cache: the prompt is never fed, and the first block decodes at positions 0.. with no first token (on the
    tiny checkpoint, with no context at all, it then proposes the mask id and never ends). The decoder prefills."""
    c, (run,) = defect(v2, "one-block-prompt")
    assert run["error"] is None or run["error"].startswith("Stalled")
    assert run["trace"][0] == [0, 32, 0, 32]  # first forward: an empty cache, 32 masks, nothing written
    fed: list = []
    out = v2.decode(c, fed=fed)
    assert fed[0] == (0, 32, True) and len(out.rows[0].token_ids) == c.settings["gen_length"]


def test_fastdllm_v2_batch_row_on_a_block_boundary_misses_its_first_token(v2):
    """A row whose prompt ends on a block boundary, in a batch with a shorter and a longer prompt: after its last
    prompt block the published merge writes the commit pass's next token only for rows whose prompt ended inside
    that block, so this row's first token comes from a peek (the output at its own masked position) instead. Its
    tokens then differ from its tokens alone; the decoder's do not."""
    c, (run,) = defect(v2, "row-on-block-boundary")
    alone_case, (alone,) = defect(v2, "row-on-block-boundary-alone")
    assert run["error"] is None and alone["error"] is None
    in_batch, by_itself = published_rows(v2, c, run)[1], published_rows(v2, alone_case, alone)[0]
    assert in_batch != by_itself
    assert v2.decode(c).rows[1].token_ids == by_itself == v2.decode(alone_case).rows[0].token_ids


def test_fastdllm_v2_does_not_notice_an_end_of_sequence_from_the_commit_pass(v2):
    """A row finishes only when a peek unmasks the stop token; the one the commit pass writes as the next block's
    first token is never checked, so the published decode goes on. Same tokens up to it, more forwards."""
    c, (run,) = defect(v2, "eos-from-commit")
    out = v2.decode(c)
    assert run["error"] is None and not out.rows[0].hit_max_tokens
    assert [out.rows[0].token_ids] == published_rows(v2, c, run)
    assert run["forwards"] > out.nfe


def test_fastdllm_v2_crashes_when_every_row_finishes_in_a_first_block_without_prefill(v2):
    """With no prefill the cache is still None after the first block when every row finished there (the commit pass
    is skipped), and the row removal calls ``len(past_key_values)``."""
    c, (run,) = defect(v2, "all-finish-first-block")
    assert run["error"] is not None and run["error"].startswith("TypeError")
    out = v2.decode(c)
    assert not any(r.hit_max_tokens for r in out.rows)
