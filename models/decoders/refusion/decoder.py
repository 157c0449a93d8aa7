"""ReFusion decoding: plan masked slots with the MDM head, verify them autoregressively, reuse every committed K/V.

The network is a causal ``Qwen3ForCausalLM``. The buffer is the prompt followed by committed slots in the order they
were committed, each token keeping its own position id (RoPE is applied before keys enter the cache, so the buffer
need not be sorted). One iteration over the still-masked slots R of the current serial block:

  A. plan:   feed masks(R) on top of the cache (the first call also feeds the prompt); read logits UNSHIFTED;
             draft = argmax (Gumbel-max at T > 0); choose slots whose first-token probability > slot_threshold
             (else the single best); crop the masks back out of the cache.
  B. verify: feed the chosen drafts concatenated; read probabilities SHIFTED (row j-1 scores token j); the first
             token of each slot is accepted by force. Leading whole accepted slots are committed with the K/V this
             pass wrote. An accepted end-of-sequence commits up to it and closes the serial block.
  C. if not even the first chosen slot was accepted whole: complete all chosen slots in parallel (draft pass with
     rejected tokens re-masked, then a verify pass, until every slot is accepted). The k windows are fed together
     on the one committed cache row with a mask that lets each window see the committed buffer and its own earlier
     tokens only, so each slot's K/V is computed from the buffer and that slot alone; only the accepted entries are
     kept (a small copy of the tail), never a copy of the committed cache per slot.

The algorithm is written per row, in plain Python over host lists, as a generator of forward requests, one class per
step above, that say what each forward must read back (``requests.py``; ``cache.drive`` batches the rows of a batch
into one forward per round and reads every row's answers in one transfer); the cache is the native network's
preallocated buffer or, for any other causal LM, a transformers cache (``cache.py``).

Two reference defects are fixed (docs/decoders.md §1.4): after an end-of-sequence in path C the slots to drop
are found by mapping the row through the chosen set, and the output is cut at the first end-of-sequence in position
order. Without an end-of-sequence the tokens and forward count equal the reference's.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Generator, Iterator, Sequence

import torch
from torch import Tensor

from models.decoders.contract import (ConfigError, DecodeOutput, DecodeResult, Decoder, Step, canvas_field,
                                      cut_after_eos, require_filled, token_id_field)
from models.decoders.refusion.cache import NativeStepper, Round, RowCache, RowProgram, TransformersStepper, drive
from models.decoders.refusion.requests import Plan, Reply, Request, SlotDraft, SlotVerify, Verify
from models.decoders.sampling import make_generator


@dataclass(frozen=True)
class RefusionConfig:
    """ReFusion's eval.py defaults (the registry's presets carry eval.sh's per-task settings)."""

    gen_length: int | None = canvas_field()
    slot_size: int = 8
    serial_num_blocks: int = 2
    slot_threshold: float = 0.9
    token_threshold: float = 0.9
    temperature: float = 0.0
    seed: int | None = None  # seeds the Gumbel noise when temperature > 0
    mask_id: int | None = token_id_field()  # <|mask|>
    eos_id: int | None = token_id_field()  # the tokenizer's eos (<|im_end|>)


def refusion_at_canvas(cfg: RefusionConfig, canvas: int) -> RefusionConfig:
    return dataclasses.replace(cfg, gen_length=canvas)


def validate_refusion_config(cfg: RefusionConfig) -> None:
    """Raise ConfigError (one line) for a configuration the decoder cannot run; nothing is rounded silently.
    Token ids are checked when they are set (the adapter fills them at decode time)."""
    require_filled(cfg, "refusion", ("canvas",))
    for name in ("gen_length", "slot_size", "serial_num_blocks", "mask_id", "eos_id"):
        value = getattr(cfg, name)
        if value is None and name in ("mask_id", "eos_id"):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"refusion: {name} must be an integer, got {value!r}")
    if cfg.gen_length < 1 or cfg.slot_size < 1 or cfg.serial_num_blocks < 1:
        raise ConfigError(
            f"refusion: gen_length, slot_size and serial_num_blocks must be >= 1 "
            f"(got {cfg.gen_length}, {cfg.slot_size}, {cfg.serial_num_blocks})"
        )
    unit = cfg.slot_size * cfg.serial_num_blocks
    if cfg.gen_length % unit:
        nearest = sorted({max(unit, cfg.gen_length // unit * unit), math.ceil(cfg.gen_length / unit) * unit})
        raise ConfigError(
            f"refusion: gen_length={cfg.gen_length} does not split into {cfg.serial_num_blocks} serial blocks of whole "
            f"{cfg.slot_size}-token slots; use a multiple of slot_size*serial_num_blocks={unit} "
            f"(e.g. {' or '.join(map(str, nearest))})"
        )
    for name in ("slot_threshold", "token_threshold"):
        value = getattr(cfg, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"refusion: {name} must be a number in [0, 1], got {value!r}")
    if not isinstance(cfg.temperature, (int, float)) or not math.isfinite(cfg.temperature) or cfg.temperature < 0:
        raise ConfigError(f"refusion: temperature must be a finite number >= 0, got {cfg.temperature!r}")
    ids = (cfg.mask_id, cfg.eos_id)
    if None not in ids and (min(ids) < 0 or cfg.mask_id == cfg.eos_id):
        raise ConfigError(f"refusion: mask_id and eos_id must be distinct ids >= 0 (got {cfg.mask_id}, {cfg.eos_id})")
    if cfg.seed is not None and (isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int)):
        raise ConfigError(f"refusion: seed must be an integer or None, got {cfg.seed!r}")


@dataclass(frozen=True)
class CommitEvent:
    """State right after a commit, for tests and tracing."""

    path: str  # "verify" (global verification accepted leading slots) or "parallel" (in-slot completion)
    tokens: tuple[int, ...]  # whole buffer: prompt, then committed tokens in commit order
    positions: tuple[int, ...]
    n_new: int  # tokens this commit appended (the tail of ``tokens``)
    slot_size: int
    kv: list[tuple[Tensor, Tensor]]  # per layer, copies of this row's cached keys/values [1, H, len(tokens), D]
    nfe: int  # forwards this row took part in so far
    row: int = 0  # the prompt's index in the batch


@dataclass(frozen=True)
class RefusionTrace:
    """One row's decode in full (``DecodeOutput.trace`` holds one per row)."""

    token_ids: list[int]  # generated ids in position order, up to and including the first end-of-sequence
    nfe: float  # network calls; a batched call counts 1/rows for each row it ran
    hit_max_tokens: bool  # no end-of-sequence was generated
    iterations: int  # plan/verify rounds
    tokens_per_forward: float  # the reference's "TPF" (generate.py L227/L327), kept for comparison
    committed_tokens: int  # tokens committed after the prompt, before the end-of-sequence cut
    forwards: int  # the forwards this row took part in
    commit_step: tuple[int, ...]  # per token of token_ids, the forward (of this row's) whose commit wrote it

    def to_decode_result(self) -> DecodeResult:
        return DecodeResult(token_ids=list(self.token_ids), nfe=float(self.nfe), hit_max_tokens=self.hit_max_tokens,
                            forwards=self.forwards, commit_step=self.commit_step)


@dataclass
class _State:
    """One row's committed buffer; its cache row always holds exactly ``tokens``, in the same order, between rounds;
    and the forward count at which each token past the prompt was committed."""

    tokens: list[int]
    positions: list[int]
    cache: RowCache
    steps: list[int] = dataclasses.field(default_factory=list)
    row: int = 0
    forwards: int = 0
    iterations: int = 0
    tpf_sum: float = 0.0
    on_commit: Callable[[CommitEvent], None] | None = None

    def commit(self, tokens: list[int], positions: list[int], path: str, slot_size: int) -> None:
        self.tokens.extend(tokens)
        self.positions.extend(positions)
        self.steps.extend([self.forwards] * len(tokens))
        if self.cache.length() != len(self.tokens):
            raise RuntimeError(f"refusion: cache holds {self.cache.length()} entries, buffer {len(self.tokens)}")
        if self.on_commit is not None:
            self.on_commit(CommitEvent(path, tuple(self.tokens), tuple(self.positions), len(tokens), slot_size,
                                       self.cache.kv(), self.forwards, self.row))


def _ask(state: _State, request: Request) -> Generator[Request, Reply, Reply]:
    """One network call on top of the row's cache (the call appends the request's tokens); returns its reads."""
    reply = yield request
    state.forwards += 1
    return reply


def refusion_generate(network: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                      cfg: RefusionConfig, row_seeds: Sequence[int] | None = None) -> DecodeOutput:
    """The decoder contract over a left-padded batch: each row decodes on its real tokens only, all rows together
    on a native network (one forward per round), row by row on any other; ``trace`` holds each row's
    ``RefusionTrace``. ``nfe`` counts network calls (a batched one once)."""
    if attention_mask is None:
        prompts = list(input_ids)
    else:
        prompts = [row[mask.bool()] for row, mask in zip(input_ids, attention_mask)]
    traces = refusion_decode_rows(network, prompts, cfg, row_seeds=row_seeds)
    return DecodeOutput(rows=tuple(t.to_decode_result() for t in traces), nfe=round(sum(t.nfe for t in traces)),
                        trace=tuple(traces))


def _check_prompt(prompt: torch.Tensor) -> None:
    if prompt.dim() != 1 or prompt.shape[0] < 1:
        raise ValueError(f"refusion: each prompt must be a 1-D tensor of >= 1 ids, got shape {tuple(prompt.shape)}")
    if prompt.dtype != torch.long:
        raise ValueError(f"refusion: prompt_ids must be torch.long token ids, got {prompt.dtype}")


def refusion_decode_row(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    cfg: RefusionConfig,
    on_commit: Callable[[CommitEvent], None] | None = None,
) -> RefusionTrace:
    """Decode ``cfg.gen_length`` tokens after ``prompt_ids`` ([1, P]); ``on_commit`` sees the state after each
    commit."""
    if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1 or prompt_ids.shape[1] < 1:
        raise ValueError(f"refusion: prompt_ids must have shape [1, P] with P >= 1, got {tuple(prompt_ids.shape)}")
    return refusion_decode_rows(model, [prompt_ids[0]], cfg, on_commit)[0]


def _row_config(cfg: RefusionConfig, row_seeds: Sequence[int] | None, row: int) -> RefusionConfig:
    """A row's own Gumbel stream when the harness gives per-row seeds (the same sample, the same draws, any batch)."""
    return cfg if row_seeds is None else dataclasses.replace(cfg, seed=int(row_seeds[row]))


@torch.no_grad()
def refusion_rounds(
    model: torch.nn.Module,
    prompts: list[torch.Tensor],
    cfg: RefusionConfig,
    on_commit: Callable[[CommitEvent], None] | None = None,
    row_seeds: Sequence[int] | None = None,
    max_rows: int | None = None,
) -> Iterator[Round]:
    """Decode every prompt (1-D ids, any lengths) together: one forward per round for all unfinished rows.

    A native network (one with ``new_cache``; a ``torch.compile``'d one too) decodes in one buffer of at most
    ``max_rows`` rows (default: one per prompt), allocated once: the first prompts start at once and each later one
    takes the row of one that finished, so the batch stays full (continuous batching; a row's tokens do not depend
    on its neighbours). Any other causal LM goes row by row through a transformers cache."""
    require_filled(cfg, "refusion")
    validate_refusion_config(cfg)
    if not prompts:
        return
    for prompt in prompts:
        _check_prompt(prompt)
    device = prompts[0].device
    flat = torch.cat(list(prompts)).tolist()  # every prompt read once, together
    bounds = [0, *itertools.accumulate(p.shape[0] for p in prompts)]
    host_prompts = [flat[a:b] for a, b in zip(bounds, bounds[1:])]
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"refusion: max_rows must be at least 1, got {max_rows}")
    native = hasattr(model, "new_cache")
    rows = min(max_rows or len(prompts), len(prompts)) if native else 1
    capacity = max(p.shape[0] for p in prompts) + 2 * cfg.gen_length + cfg.slot_size
    stepper = NativeStepper(model, rows, capacity) if native else TransformersStepper(model, device)
    slots: dict[int, int] = {}
    programs = [_row_program(host_prompts[i], _row_config(cfg, row_seeds, i), RowCache(stepper, slots, i), i,
                             on_commit, device) for i in range(len(prompts))]
    yield from drive(stepper, programs, slots, rows)


def refusion_decode_rows(
    model: torch.nn.Module,
    prompts: list[torch.Tensor],
    cfg: RefusionConfig,
    on_commit: Callable[[CommitEvent], None] | None = None,
    row_seeds: Sequence[int] | None = None,
    max_rows: int | None = None,
) -> list[RefusionTrace]:
    """Every prompt decoded (``refusion_rounds``), its trace's ``nfe`` its share of the forwards it ran."""
    traces: list[RefusionTrace] = [None] * len(prompts)  # type: ignore[list-item]
    for round_ in refusion_rounds(model, prompts, cfg, on_commit, row_seeds, max_rows):
        for i, trace, share in round_.returned:
            traces[i] = dataclasses.replace(trace, nfe=share)
    return traces


def refusion_stream(network: torch.nn.Module, prompts: Sequence[torch.Tensor], cfg: RefusionConfig, max_rows: int,
                    row_seeds: Sequence[int] | None = None) -> Iterator[Step]:
    """Rows in flight for the harness (``Decoder.stream``): one ``Step`` per round."""
    for round_ in refusion_rounds(network, list(prompts), cfg, row_seeds=row_seeds, max_rows=max_rows):
        finished = tuple((i, dataclasses.replace(trace, nfe=share).to_decode_result())
                         for i, trace, share in round_.returned)
        yield Step(round_.started, finished, round_.rows)


def _row_program(prompt: list[int], cfg: RefusionConfig, cache: RowCache, row: int,
                 on_commit: Callable[[CommitEvent], None] | None, device: torch.device) -> RowProgram:
    """The whole decode of one prompt, as requests for forwards; returns its ``RefusionTrace`` (nfe filled later)."""
    prompt_len = len(prompt)
    generator = make_generator(cfg.seed, device) if cfg.temperature > 0 else None
    state = _State(tokens=list(prompt), positions=list(range(prompt_len)), cache=cache, row=row, on_commit=on_commit)
    block_len = cfg.gen_length // cfg.serial_num_blocks
    for block in range(cfg.serial_num_blocks):
        start = prompt_len + block * block_len
        remaining = list(range(start, start + block_len, cfg.slot_size))  # first positions of the masked slots
        eos_seen = False
        while remaining:
            remaining, eos = yield from _iteration(prompt, state, remaining, cfg, generator)
            eos_seen |= eos
        if eos_seen:
            break
    return _finish(state, prompt_len, cfg)


def _plan_request(prompt: list[int], state: _State, slot_pos: list[int], cfg: RefusionConfig,
                  generator: torch.Generator | None) -> Plan:
    """Masks over every still-masked slot (the first call also feeds the prompt, whose logits are not read)."""
    masks = [cfg.mask_id] * len(slot_pos)
    reads = dict(slot_size=cfg.slot_size, slot_threshold=cfg.slot_threshold, temperature=cfg.temperature,
                 generator=generator)
    if state.cache.length() == 0:
        return Plan(prompt + masks, list(range(len(prompt))) + slot_pos, prompt_len=len(prompt), **reads)
    return Plan(masks, slot_pos, **reads)


def _slots(flat: list[int], size: int, chosen: list[int]) -> list[list[int]]:
    return [flat[j * size:(j + 1) * size] for j in chosen]


def _leading(flags: list[bool]) -> list[bool]:
    """True up to the first False: the tokens accepted in order."""
    return list(itertools.accumulate(flags, lambda x, y: x and y))


def _accepted_runs(accepted: list[bool], runs: int, size: int) -> list[list[bool]]:
    """A verify read (every token but each run's first) as per-run flags, the first accepted by force."""
    per = size - 1
    return [[True, *accepted[r * per:(r + 1) * per]] for r in range(runs)]


def _iteration(prompt: list[int], state: _State, remaining: list[int], cfg: RefusionConfig,
               generator: torch.Generator | None) -> Generator[Request, Reply, tuple[list[int], bool]]:
    """One plan + verify round (plus the in-slot loop if needed); returns the slots still masked and an EOS flag."""
    ss, n_slots, base = cfg.slot_size, len(remaining), len(state.tokens)
    slot_pos = [p + i for p in remaining for i in range(ss)]

    # (A) plan: unshifted MDM logits over every masked slot of the block.
    plan = yield from _ask(state, _plan_request(prompt, state, slot_pos, cfg, generator))
    state.cache.truncate(base)
    chosen = [j for j, ok in enumerate(plan.confident) if ok]
    if not chosen:  # the single most confident slot (the first of equals, as argmax)
        chosen = [max(range(n_slots), key=plan.confidence.__getitem__)]
    k = len(chosen)

    # (B) global verification of the concatenated drafts (shifted probabilities).
    blocks, block_pos = _slots(plan.tokens, ss, chosen), _slots(slot_pos, ss, chosen)
    flat_tokens, flat_pos = sum(blocks, []), sum(block_pos, [])
    verified = yield from _ask(state, Verify(flat_tokens, flat_pos, run=ss, token_threshold=cfg.token_threshold))
    accept = _accepted_runs(verified.accepted, k, ss)
    flat_accept = sum(accept, [])
    prefix = next((i for i, a in enumerate(flat_accept) if not a), len(flat_accept))
    eos_at = next((i for i in range(prefix) if flat_tokens[i] == cfg.eos_id), None)
    if eos_at is not None or prefix >= ss:
        n_commit = eos_at + 1 if eos_at is not None else prefix // ss * ss
        n_done = -(-n_commit // ss)
        state.cache.truncate(base + n_commit)
        state.commit(flat_tokens[:n_commit], flat_pos[:n_commit], "verify", ss)
        state.iterations += 1
        state.tpf_sum += ss * n_done / 2
        done = set(chosen[:n_done])
        limit = chosen[n_done - 1] if eos_at is not None else n_slots  # after an EOS, later slots are dropped
        return [p for j, p in enumerate(remaining) if j < limit and j not in done], eos_at is not None

    # (C) parallel in-slot completion of the chosen slots, on the one cache row.
    state.cache.truncate(base)
    tags = [_leading(a) for a in accept]
    rows, passes, eos_row = yield from _complete_slots(state, blocks, block_pos, tags, cfg)
    flat = sum(rows, [])
    n_keep = next((i + 1 for i, t in enumerate(flat) if t == cfg.eos_id), len(flat))
    state.cache.truncate(base + n_keep)
    state.commit(flat[:n_keep], flat_pos[:n_keep], "parallel", ss)
    state.iterations += 1
    state.tpf_sum += ss * k / (2 * passes + 2)
    done = set(chosen)
    limit = chosen[eos_row] if eos_row is not None else n_slots  # the row indexes the chosen set, not remaining
    return [p for j, p in enumerate(remaining) if j < limit and j not in done], eos_row is not None


def _complete_slots(state: _State, blocks: list[list[int]], block_pos: list[list[int]], tags: list[list[bool]],
                    cfg: RefusionConfig) -> Generator[Request, Reply, tuple[list[list[int]], int, int | None]]:
    """Accept every chosen slot token by token, all slots at once; returns (slot tokens, passes, first EOS slot).

    After the committed buffer the cache row holds each slot's accepted prefix, slot by slot (``start`` entries
    each). Each pass feeds every slot's window (group = slot) twice: drafted from its masked version (unshifted
    argmax, whatever the temperature), then verified (shifted); a token is accepted when its probability passes the
    threshold or the token before it was already accepted, so every slot gains >= 1 token. The windows then start
    at the last token all slots accepted, re-fed so its logits score the next one; the accepted window entries are
    moved behind their slot's prefix and the rest are dropped.
    """
    ss, base = cfg.slot_size, len(state.tokens)
    rows, tags, pos = [list(b) for b in blocks], [list(t) for t in tags], block_pos
    start, passes, eos_row, complete = 0, 0, None, False
    while not complete:
        if passes >= ss:
            raise RuntimeError("refusion: in-slot completion did not finish within slot_size passes")
        n_rows, width = len(rows), ss - start
        known = [t[start:] for t in tags]
        window_pos = [p for r in pos for p in r[start:]]
        masked = [tok if seen else cfg.mask_id for r, kn in zip(rows, known) for tok, seen in zip(r[start:], kn)]
        where = dict(window=width, committed=base, owned=start)
        drafted = yield from _ask(state, SlotDraft(masked, window_pos, **where))
        state.cache.truncate(base + n_rows * start)  # the draft pass must leave nothing behind
        for r, (row, kn) in enumerate(zip(rows, known)):
            row[start:] = [tok if seen else drafted.tokens[r * width + i]
                           for i, (tok, seen) in enumerate(zip(row[start:], kn))]
        window = [tok for row in rows for tok in row[start:]]
        verified = yield from _ask(state, SlotVerify(window, window_pos, token_threshold=cfg.token_threshold,
                                                     **where))
        passes += 1
        passed = _accepted_runs(verified.accepted, n_rows, width)
        counts, host_eos = [], []
        for r, (ok, kn) in enumerate(zip(passed, known)):
            ok = [ok[0], *(o or k for o, k in zip(ok[1:], kn[:-1]))]  # the first follows an accepted one
            new_tags = _leading(ok)
            tags[r][start:] = new_tags
            counts.append(sum(new_tags))
            host_eos.append(any(t == cfg.eos_id and a for t, a in zip(rows[r][start:], new_tags)))
        if any(host_eos):
            eos_row = host_eos.index(True)
            rows, tags, pos = rows[: eos_row + 1], tags[: eos_row + 1], pos[: eos_row + 1]
            tags[eos_row] = [True] * ss  # the EOS slot is accepted whole; its tail is cut after the EOS at commit
            counts = counts[: eos_row] + [width]
        complete = min(counts) == width
        new_start = start + min(counts) - (0 if complete else 1)
        fed = n_rows * start  # where this pass's windows begin in the tail
        gained = new_start - start  # window entries each slot keeps
        index = [i for r in range(len(rows))
                 for i in (*range(r * start, (r + 1) * start), *range(fed + r * width, fed + r * width + gained))]
        state.cache.keep_tail(base, index)
        start = new_start
    return rows, passes, eos_row


def _finish(state: _State, prompt_len: int, cfg: RefusionConfig) -> RefusionTrace:
    """Sort the committed tokens by position and cut after the first end-of-sequence."""
    gen = sorted(zip(state.positions[prompt_len:], state.tokens[prompt_len:], state.steps))
    ids, found = cut_after_eos([t for _, t, _ in gen], [cfg.eos_id])
    expected = list(range(prompt_len, prompt_len + len(ids)))
    if [p for p, _, _ in gen[: len(ids)]] != expected:
        raise RuntimeError("refusion: committed positions before the first end-of-sequence are not contiguous")
    return RefusionTrace(
        token_ids=ids,
        nfe=float(state.forwards),
        hit_max_tokens=not found,
        iterations=state.iterations,
        tokens_per_forward=state.tpf_sum / max(state.iterations, 1),
        committed_tokens=len(gen),
        forwards=state.forwards,
        commit_step=tuple(step for _, _, step in gen[: len(ids)]),
    )


REFUSION = Decoder("refusion", RefusionConfig, refusion_generate, refusion_at_canvas, validate_refusion_config,
                   stream=refusion_stream, version=1)
