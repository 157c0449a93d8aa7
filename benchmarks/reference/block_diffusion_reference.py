"""Worker for tests/models/decoders/test_block_diffusion_published.py: the published block-diffusion decoding functions
(JetAstra/SDAR ``generate.py`` ``block_diffusion_generate``; NVlabs/Fast-dLLM ``v2/generation_functions.py``
``batch_sample``) run unmodified on a stand-in for the checkpoint's remote modeling file.

It runs with the Python of a reference environment, never this project's: it imports only torch, transformers
4.52.4 and the checkout. ReFusion's environment serves (docs/benchmarks.md):
``python3 -m venv REFENV && REFENV/bin/pip install torch==2.13.0 transformers==4.52.4 numpy pandas tqdm``.
Both remote modeling files import flash-attn, which has no CPU build, so the network is transformers' own
Qwen3ForCausalLM (SDAR) or Qwen2ForCausalLM (Fast-dLLM v2) loaded from the checkpoint folder (the parameter names
are the modeling files'), behind a wrapper that implements the modeling file's calling contract:

* SDAR (``modeling_sdar.py``): ``model(ids, attention_mask, position_ids, past_key_values, use_cache, store_kv)``.
  The block attends to the cache and itself under the caller's 0/1 mask (nonzero = visible) at the caller's
  position ids; its K/V are appended to the cache only with ``store_kv`` (here: appended, then cropped back).
* Fast-dLLM v2 (``modeling.py``): ``forward(input_ids, use_cache, past_key_values, update_past_key_values,
  block_size=32)`` builds its own mask, ``q // block_size >= k // block_size`` over absolute indices (query i at
  ``cache length + i``), with position ids from the cache length, and ignores any caller mask; the cache is a
  transformers 4.52.4 ``DynamicCache`` whose ``key_cache`` lists the published function edits. ``sample_with_top_p``
  at temperature 0 is (argmax, softmax).

Every forward is counted, and its logits are compared with a full recompute of the tokens the cache holds plus the
block, under the block-causal mask the modeling file implies, without a cache (``--no-check`` skips it); the largest
difference is reported. For SDAR the worker also counts *overwrites*: positions of the current block that were not
masks at the previous forward and hold another token now (the published top-k picking non-mask positions).

    PY benchmarks/reference/block_diffusion_reference.py sdar|fastdllm-v2 --reference=CHECKOUT --checkpoint=FOLDER \
        --cases=CASES.json --out=ANSWERS.json

CASES.json is ``{"cases": [{"name": ..., "prompts": [[ids], ...], ...settings}]}``. SDAR's settings are its
function's keyword arguments (gen_length, block_length, denoising_steps, temperature, top_k, top_p,
remasking_strategy, confidence_threshold, eb_threshold, stopping_criteria_idx) plus mask_id and seed
(``torch.manual_seed(seed)`` right before each call); each prompt is decoded alone (the function is batch 1).
Fast-dLLM v2's are ``batch_sample``'s (block_size, small_block_size, max_new_tokens, threshold, stop_token, mask_id,
top_p, temperature) plus pad_id (the tokenizer's pad id it writes after a stop); the prompts are one batch,
right-padded with the mask id as v2/eval.py pads them. Any case may set max_forwards (default 1000): a decode that
needs more is stopped and answered as an error (the published v2 loop never ends on a network that proposes the
mask id). ANSWERS.json is, per case, ``{"name", "runs": [{"tokens": [[ids after the prompt] per row], "forwards": n,
"overwrites": n, "max_logit_error": x, "trace": [[cached, width, writes, masks] per forward], "error": null or
"Type: message (file:line)"}]}``; the tokens are the whole generated region, not cut at a stop.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import types
from pathlib import Path

import torch


def load_inner(kind: str, folder: Path) -> torch.nn.Module:
    """transformers' own class for the checkpoint's layout, with every stored tensor used and none missing."""
    import transformers

    if kind == "sdar":
        config_cls, model_cls = transformers.Qwen3Config, transformers.Qwen3ForCausalLM
    else:
        config_cls, model_cls = transformers.Qwen2Config, transformers.Qwen2ForCausalLM
    raw = json.loads((folder / "config.json").read_text())
    dropped = {"model_type", "architectures", "auto_map", "transformers_version"}
    config = config_cls(**{k: v for k, v in raw.items() if k not in dropped})
    config._attn_implementation = "sdpa"  # both modeling files attend with torch's scaled_dot_product_attention
    model, info = model_cls.from_pretrained(folder, config=config, torch_dtype=torch.float32,
                                            output_loading_info=True)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    problems = {k: sorted(set(v) - tied) for k, v in info.items() if set(v) - tied}
    if problems:
        raise RuntimeError(f"checkpoint does not load into {model_cls.__name__}: {problems}")
    return model.eval()


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool [.., Q, K] visibility mask as the additive float mask transformers takes (0 visible, finfo.min not)."""
    return torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)


class Stalled(RuntimeError):
    """More forwards than the case allows: the published loop does not end (a network that proposes the mask id
    keeps its masks forever)."""


class Counter:
    """What both stand-ins share: the wrapped network, the forward count and limit, the checks' results."""

    def __init__(self, inner: torch.nn.Module, check: bool, block: int, mask_id: int, limit: int) -> None:
        self.inner, self.check, self.block, self.mask_id, self.limit = inner, check, block, mask_id, limit
        self.forwards, self.overwrites, self.max_error = 0, 0, 0.0
        self.trace: list[list[int]] = []  # per forward: [cached entries, width fed, 1 if it writes, masks fed]

    @property
    def device(self) -> torch.device:
        return next(self.inner.parameters()).device

    def eval(self) -> "Counter":
        return self

    def count(self) -> None:
        self.forwards += 1
        if self.forwards > self.limit:
            raise Stalled(f"more than {self.limit} forwards: the published loop does not end")

    def recompute(self, ids: torch.Tensor, positions: torch.Tensor, block: int, logits: torch.Tensor) -> None:
        """Compare the last logits.shape[1] outputs with a cache-free forward of ``ids`` under the block-causal
        mask over ``positions``."""
        visible = (positions[:, :, None] // block) >= (positions[:, None, :] // block)  # [B, N, N]
        full = self.inner(input_ids=ids, attention_mask=additive(visible[:, None], logits.dtype),
                          position_ids=positions, use_cache=False).logits[:, -logits.shape[1]:]
        self.max_error = max(self.max_error, (full - logits).abs().max().item())


class SdarStandIn(Counter):
    """``modeling_sdar.py``'s contract on transformers' Qwen3 (module docstring)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.stored_ids = torch.zeros((1, 0), dtype=torch.long)
        self.stored_positions = torch.zeros((1, 0), dtype=torch.long)
        self.previous: tuple[int, torch.Tensor] | None = None  # (first position, ids) of the last forward

    def __call__(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=True,
                 store_kv=False):
        self.count()
        start = int(position_ids[0, 0])
        if self.previous is not None and self.previous[0] == start and self.previous[1].shape == input_ids.shape:
            before = self.previous[1]
            self.overwrites += int(((before != self.mask_id) & (before != input_ids)).sum())
        self.previous = (start, input_ids.clone())
        cached = past_key_values.get_seq_length()
        self.trace.append([cached, input_ids.shape[1], int(bool(store_kv)), int((input_ids == self.mask_id).sum())])
        keys = cached + input_ids.shape[1]
        visible = attention_mask[..., :keys] > 0  # [1, Q, K]: the loop's float 1/0 block mask
        mask = additive(visible, self.inner.dtype)[:, None].expand(input_ids.shape[0], 1, -1, -1)
        out = self.inner(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                         past_key_values=past_key_values, use_cache=True)
        if not store_kv:
            past_key_values.crop(cached)  # attend to the cache, write nothing
        ids = torch.cat([self.stored_ids, input_ids], dim=1)
        positions = torch.cat([self.stored_positions, position_ids], dim=1)
        if self.check:
            self.recompute(ids, positions, self.block, out.logits)
        if store_kv:
            self.stored_ids, self.stored_positions = ids, positions
        return out


class FastDllmV2StandIn(Counter):
    """``modeling.py``'s contract on transformers' Qwen2 (module docstring); ``batch_sample`` is bound to it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.stored_ids: torch.Tensor | None = None  # [B, n]: the tokens the cache holds, row by row
        self.snapshot: torch.Tensor | None = None  # layer 0's keys after the last write, to follow removed rows

    def _follow_removed_rows(self, cache) -> None:
        """batch_sample drops finished rows by indexing key_cache itself; find which rows it kept."""
        keys = cache.key_cache[0]
        if self.snapshot is None or keys.shape[0] == self.snapshot.shape[0]:
            return
        kept, old = [], 0
        for row in range(keys.shape[0]):
            while not torch.equal(self.snapshot[old], keys[row]):
                old += 1
            kept.append(old)
            old += 1
        self.stored_ids, self.snapshot = self.stored_ids[kept], self.snapshot[kept]

    def forward(self, input_ids, use_cache=True, past_key_values=None, update_past_key_values=False,
                block_size=32, **unused):
        from transformers.cache_utils import DynamicCache

        if unused:
            raise TypeError(f"the stand-in does not implement {sorted(unused)}")
        self.count()
        cache = past_key_values if past_key_values is not None else DynamicCache()
        cached = cache.get_seq_length()
        batch, width = input_ids.shape
        self.trace.append([cached, width, int(bool(update_past_key_values)), int((input_ids == self.mask_id).sum())])
        q = torch.arange(width) + cached
        k = torch.arange(cached + width)
        visible = (q[:, None] // block_size) >= (k[None, :] // block_size)  # the modeling file's eval_mask
        mask = additive(visible, self.inner.dtype)[None, None].expand(batch, 1, -1, -1)
        positions = q[None].expand(batch, -1)
        if cached:
            self._follow_removed_rows(cache)
        out = self.inner(input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                         use_cache=True)
        if not update_past_key_values:
            cache.crop(cached)
        ids = input_ids if not cached else torch.cat([self.stored_ids, input_ids], dim=1)
        if self.check:
            self.recompute(ids, torch.arange(ids.shape[1])[None].expand(batch, -1), self.block, out.logits)
        if update_past_key_values:
            self.stored_ids, self.snapshot = ids, cache.key_cache[0].clone()
        return types.SimpleNamespace(logits=out.logits, past_key_values=cache)

    __call__ = forward

    def sample_with_top_p(self, logits, top_p, temperature):
        if temperature != 0:
            raise NotImplementedError("the stand-in implements sample_with_top_p at temperature 0 only")
        return logits.argmax(dim=-1), torch.softmax(logits, dim=-1)


def describe(error: BaseException, checkout: Path) -> str:
    """``Type: message (file:line)`` at the innermost frame inside the checkout."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve().is_relative_to(
        checkout.resolve())]
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def import_published(kind: str, checkout: Path):
    if kind == "sdar":
        sys.path.insert(0, str(checkout))
        import generate  # JetAstra/SDAR generate.py

        return generate.block_diffusion_generate
    folder = checkout / "v2" if (checkout / "v2" / "generation_functions.py").is_file() else checkout
    sys.path.insert(0, str(folder))
    import transformers.utils

    # generation_functions.py decorates a plain class with @auto_docstring, which only writes docstrings and which
    # transformers 4.52.4 cannot apply to a class without its own __init__; make it the identity for the import.
    real, transformers.utils.auto_docstring = transformers.utils.auto_docstring, lambda obj=None, **_: obj
    try:
        import generation_functions  # NVlabs/Fast-dLLM v2/generation_functions.py
    finally:
        transformers.utils.auto_docstring = real
    return generation_functions.Fast_dLLM_QwenForCausalLM.batch_sample


SDAR_ARGS = ("gen_length", "block_length", "denoising_steps", "temperature", "top_k", "top_p", "remasking_strategy",
             "confidence_threshold", "eb_threshold", "stopping_criteria_idx")
V2_ARGS = ("block_size", "max_new_tokens", "small_block_size", "threshold", "stop_token", "top_p", "temperature")


def run_sdar(published, inner, case: dict, checkout: Path, check: bool) -> list[dict]:
    runs = []
    options = {k: case[k] for k in SDAR_ARGS if k in case}
    for prompt in case["prompts"]:
        model = SdarStandIn(inner, check, case["block_length"], case["mask_id"], case.get("max_forwards", 1000))
        ids = torch.tensor([prompt], dtype=torch.long)
        run = {"tokens": None, "error": None}
        try:
            torch.manual_seed(case.get("seed", 0))
            x = published(model, {"input_ids": ids}, case["mask_id"], **options)
            run["tokens"] = [x[0, len(prompt):].tolist()]
        except Exception as error:  # a published defect is an answer too
            run["error"] = describe(error, checkout)
        run.update(forwards=model.forwards, overwrites=model.overwrites, max_logit_error=model.max_error,
                   trace=model.trace)
        runs.append(run)
    return runs


def run_fastdllm_v2(published, inner, case: dict, checkout: Path, check: bool) -> list[dict]:
    prompts, mask_id = case["prompts"], case["mask_id"]
    width = max(map(len, prompts))
    ids = torch.tensor([p + [mask_id] * (width - len(p)) for p in prompts], dtype=torch.long)
    seq_len = torch.tensor([len(p) for p in prompts])
    model = FastDllmV2StandIn(inner, check, case["block_size"], mask_id, case.get("max_forwards", 1000))
    sample = types.MethodType(published, model)
    tokenizer = types.SimpleNamespace(pad_token_id=case.get("pad_id", 0))
    run = {"tokens": None, "error": None}
    try:
        torch.manual_seed(case.get("seed", 0))
        out = sample(ids, tokenizer, min_len=min(map(len, prompts)), seq_len=seq_len, mask_id=mask_id,
                     use_block_cache=False, **{k: case[k] for k in V2_ARGS if k in case})
        run["tokens"] = [out[i][len(p):].tolist() for i, p in enumerate(prompts)]
    except Exception as error:
        run["error"] = describe(error, checkout)
    run.update(forwards=model.forwards, overwrites=0, max_logit_error=model.max_error, trace=model.trace)
    return [run]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("sdar", "fastdllm-v2"), help="which published function")
    parser.add_argument("--reference", dest="checkout", required=True, type=Path,
                        help="checkout of JetAstra/SDAR (generate.py) or NVlabs/Fast-dLLM (v2/generation_functions.py)")
    parser.add_argument("--checkpoint", required=True, type=Path, help="checkpoint folder (config.json + weights)")
    parser.add_argument("--cases", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--no-check", action="store_true", help="skip the full-recompute check of every forward")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sys.stdout = sys.stderr  # the published code may print
    published = import_published(args.kind, args.checkout)
    inner = load_inner(args.kind, args.checkpoint)
    run = run_sdar if args.kind == "sdar" else run_fastdllm_v2
    answers = []
    with torch.no_grad():
        for case in json.loads(args.cases.read_text())["cases"]:
            answers.append({"name": case.get("name"), "runs": run(published, inner, case, args.checkout,
                                                                 not args.no_check)})
    args.out.write_text(json.dumps({"cases": answers}))


if __name__ == "__main__":
    main()
