"""Block diffusion with exact KV reuse (SDAR/TraDo, Fast-dLLM v2): blocks decoded in parallel, left to right.

The sequence is cut into blocks of ``block_length`` at absolute positions 0, B, 2B, ...; attention is block-causal
(bidirectional inside a block), so a finished block's K/V never change and are written once. Per block:

1. the block is filled with masks (the prompt's tail shares the first decode block with them);
2. *peek*: forward the block alone against the cache without writing it, turn logits into proposals (``propose``)
   and commit some masks by the configured rule (``commit_rule``); repeat while masks remain;
3. *commit*: one forward of the finished block that writes its K/V (its last logit may give the next block's first
   token, Fast-dLLM v2's one AR step); a row stops after a block that holds an end-of-sequence id.

The prompt's whole blocks are prefilled in one forward first. With ``fused_commit`` (LLaDA2, whose published
``generate`` recomputes the whole prefix every step) there is no prefill or commit forward of its own: a block's
first peek carries the blocks not yet written and writes them, so every forward is one of the reference's steps.
The rows of a batch run in lockstep on absolute
blocks (each row's prompt starts at column 0, so every row holds the same number of cached entries): a row whose
prompt still covers the current block, or whose masks are all filled, idles through the batch's peeks, which leave
its cache untouched, so its tokens are those it gets alone. Finished rows leave the batch and the cache.

On an accelerator every read of a device value by the host waits for the queue to drain, so the host tracks what
it can and reads the rest once where it must decide: the prompt lengths and each window's (sub-block's) masks at
the start; after each step, each row's masks left in the window (not for the static rule, whose count the host
knows; with ``eos_early_stop`` the same read names the rows that stopped); after each block, which rows hold an end
of sequence; after a commit pass that set the next block's first token, that window's masks. The positions go to
``block_forward`` as a range, so the network knows on the host whether its entries lie in one block.

The network is any module with ``new_cache(batch, capacity)`` and ``block_forward(ids, position_ids, cache,
block_length, write)``, ``position_ids`` a range of the columns every row shares (the native Qwen3, Qwen2 and LLaDA2
networks; docs/networks.md). docs/decoders.md describes the rules and where they depart from the published code.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence, get_args

import torch
import torch.nn.functional as F

from models.decoders.contract import (ConfigError, Decoder, DecodeOutput, DecodeResult, canvas_field, cut_after_eos,
                                      require_filled, token_id_field)
from models.decoders.sampling import Draws, check_inputs, llada_step_counts, top_k_filter, top_p_filter

Remasking = Literal["low_confidence_static", "low_confidence_dynamic", "entropy_bounded", "sequential",
                    "threshold_plus_best"]
REMASKING = get_args(Remasking)


@dataclass(frozen=True)
class BlockDiffusionConfig:
    """One block-diffusion decode. SDAR's rules are ``low_confidence_static`` (a fixed count per step from the
    schedule), ``low_confidence_dynamic`` (every mask above ``confidence_threshold``, else the schedule's count) and
    ``entropy_bounded`` (the lowest-entropy masks whose entropies sum to ``eb_threshold``, at least one), plus
    ``sequential``; Fast-dLLM v2's is ``threshold_plus_best`` (every mask above the threshold and always the most
    confident one) over sub-blocks of ``sub_block_length`` decoded left to right, with its one-token logit shift and
    the next block's first token from the commit pass.

    temperature 0 is greedy (argmax, confidence = its softmax probability); above 0 the logits are divided by it,
    truncated by ``top_k`` / ``top_p`` and sampled, confidence being the sampled token's probability under that
    truncated distribution (SDAR's sampler; SDAR's own "greedy" is temperature 1 with top_k 1).
    """

    gen_length: int | None = canvas_field()
    block_length: int = 4
    denoising_steps: int = 4
    remasking: Remasking = "low_confidence_static"
    confidence_threshold: float = 0.85
    eb_threshold: float = 0.35
    sub_block_length: int | None = None  # None: the whole block is one sub-block
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    logit_shift: bool = False  # position i scored by the logits at i - 1 (Fast-dLLM v2)
    first_token_from_commit: bool = False  # a block's first token is the argmax of the previous forward's last logit
    commit_finished_block: bool = True  # False: no commit forward once every row of the batch has finished
    fused_commit: bool = False  # finished blocks are written by the next block's first peek (LLaDA2)
    eos_early_stop: bool = False  # a row stops mid-block once its tokens up to an end of sequence are all filled
    edit_threshold: float | None = None  # LLaDA2.1's token editing: a filled token whose proposal differs re-takes it
    max_post_edit_steps: int = 16  # editing steps once the block holds no mask
    seed: int = 0
    mask_id: int | None = token_id_field()
    eos_ids: tuple[int, ...] | None = token_id_field()


def block_diffusion_at_canvas(cfg: BlockDiffusionConfig, canvas: int) -> BlockDiffusionConfig:
    return dataclasses.replace(cfg, gen_length=canvas)


def validate_block_diffusion_config(cfg: BlockDiffusionConfig) -> None:
    """One line for each setting the decoder cannot run."""
    if cfg.remasking not in REMASKING:
        raise ConfigError(f"unknown remasking {cfg.remasking!r}; valid: {', '.join(REMASKING)}")
    if cfg.edit_threshold is not None and (cfg.eos_early_stop or cfg.sub_block_length or cfg.temperature):
        raise ConfigError("token editing (edit_threshold) runs whole blocks greedily: unset eos_early_stop, "
                          "sub_block_length and temperature, or edit_threshold")
    if cfg.max_post_edit_steps < 0:
        raise ConfigError(f"max_post_edit_steps must be >= 0, got {cfg.max_post_edit_steps}")
    if cfg.block_length < 1:
        raise ConfigError(f"block_length must be >= 1, got {cfg.block_length}")
    if not 1 <= cfg.denoising_steps <= cfg.block_length:
        raise ConfigError(f"denoising_steps must be in 1..block_length ({cfg.block_length}), got {cfg.denoising_steps}")
    sub = cfg.sub_block_length
    if sub is not None and (sub < 1 or cfg.block_length % sub):
        raise ConfigError(f"sub_block_length {sub} must divide block_length {cfg.block_length}")
    if cfg.gen_length is not None and cfg.gen_length < 1:
        raise ConfigError(f"gen_length must be >= 1, got {cfg.gen_length}")
    if not cfg.temperature >= 0:
        raise ConfigError(f"temperature must be >= 0, got {cfg.temperature}")
    if cfg.top_k < 0 or not 0 < cfg.top_p <= 1:
        raise ConfigError(f"top_k must be >= 0 and top_p in (0, 1], got {cfg.top_k} and {cfg.top_p}")
    for name in ("confidence_threshold", "eb_threshold"):
        if math.isnan(getattr(cfg, name)):
            raise ConfigError(f"{name} must be a number")


def transfer_schedule(block_length: int, steps: int) -> list[int]:
    """Masks to commit at each step of a block: block // steps each, one more for the first block % steps (LLaDA's
    split of a block's masks, the same rule in SDAR's and LLaDA2's code)."""
    return llada_step_counts(block_length, steps)


# ---- proposals: logits -> (token, confidence, sampling distribution) ---------------------------------------------
@dataclass(frozen=True)
class Proposal:
    tokens: torch.LongTensor  # [A, W] the token each position would take
    confidence: torch.Tensor  # [A, W] its probability
    probs: torch.Tensor  # [A, W, V] the distribution it came from (entropy_bounded and never_the_mask read it)


def propose(logits: torch.Tensor, cfg: BlockDiffusionConfig, draws: Draws,
            drawing: Sequence[int] | None) -> Proposal:
    """Greedy at temperature 0; otherwise SDAR's sampler: /T, top-k, top-p, softmax, one draw per position of the
    window. With per-row generators only the rows in ``drawing`` (those that still hold a mask, known on the host)
    draw, as they would alone (a row idling through the batch's steps consumes nothing): a loop over rows, one
    ``multinomial`` each, the price of per-row seeds. ``drawing`` is unused with a shared generator or greedy."""
    if cfg.temperature == 0:
        probs = F.softmax(logits, dim=-1)
        tokens = probs.argmax(dim=-1)
        return Proposal(tokens, probs.gather(-1, tokens[..., None]).squeeze(-1), probs)
    scaled = logits if cfg.temperature == 1 else logits / cfg.temperature
    if cfg.top_k > 0:
        scaled = top_k_filter(scaled, cfg.top_k)
    if cfg.top_p < 1:
        scaled = top_p_filter(scaled, cfg.top_p)
    probs = F.softmax(scaled, dim=-1)
    rows, width, vocab = probs.shape
    if draws.rows is None:
        tokens = torch.multinomial(probs.reshape(-1, vocab), 1, generator=draws.shared).view(rows, width)
    else:
        tokens = probs.argmax(dim=-1)  # rows without a mask keep a placeholder nobody commits
        for row in drawing:
            tokens[row] = torch.multinomial(probs[row], 1, generator=draws.rows[row]).view(width)
    return Proposal(tokens, probs.gather(-1, tokens[..., None]).squeeze(-1), probs)


def never_the_mask(proposal: Proposal, mask_id: int) -> torch.Tensor:
    """The proposed tokens, with a proposal of the mask id itself replaced by the likeliest other token. Committing
    the mask id would leave the position masked, so a network that proposes it (an untrained one does) would stall:
    Fast-dLLM v2's published loop then never ends, SDAR's runs past its schedule, LLaDA2's leaves masks. Every
    other proposal is untouched, so tokens equal the references' wherever they finish."""
    top2 = torch.topk(proposal.probs, 2, dim=-1).indices
    other = torch.where(top2[..., 0] == mask_id, top2[..., 1], top2[..., 0])
    return torch.where(proposal.tokens == mask_id, other, proposal.tokens)


# ---- commit rules: which masks of the window take their proposal this step -------------------------------------
def _top_count(confidence: torch.Tensor, k: int, counts: torch.Tensor) -> torch.Tensor:
    """[A, W] bool: each row's ``counts[a]`` (<= k) highest confidences, from one ``torch.topk(k)`` as the reference
    calls it (so ties fall the same way), with no read of ``counts`` by the host."""
    order = torch.topk(confidence, min(k, confidence.shape[1]), dim=-1).indices
    rank_kept = torch.arange(order.shape[1], device=confidence.device)[None] < counts[:, None]
    return torch.zeros_like(confidence, dtype=torch.bool).scatter(1, order, rank_kept)


def commit_rule(cfg: BlockDiffusionConfig, proposal: Proposal, masked: torch.Tensor, step: int,
                schedule: Sequence[int]) -> torch.Tensor:
    """[A, W] bool of the masks that take their proposed token. Never more than a row's masks: the published SDAR
    rules take a top-k over every position, which, once fewer masks remain than the step's count, overwrites
    committed (or prompt) tokens; here the count is capped at the masks left (docs/decoders.md)."""
    confidence = torch.where(masked, proposal.confidence, -torch.inf)
    n_masked = masked.sum(dim=1)
    want = schedule[min(step, len(schedule) - 1)]
    if cfg.remasking == "low_confidence_static":
        return _top_count(confidence, want, n_masked.clamp(max=want))
    if cfg.remasking == "low_confidence_dynamic":
        confident = confidence > cfg.confidence_threshold
        enough = confident.sum(dim=1) >= want
        return torch.where(enough[:, None], confident, _top_count(confidence, want, n_masked.clamp(max=want)))
    if cfg.remasking == "sequential":
        columns = torch.arange(masked.shape[1], device=masked.device)[None]
        first = torch.where(masked, columns, masked.shape[1]).min(dim=1, keepdim=True).values
        return (columns >= first) & (columns < first + want) & masked
    if cfg.remasking == "entropy_bounded":
        entropy = -(proposal.probs * proposal.probs.clamp_min(1e-12).log()).sum(dim=-1)
        entropy = torch.where(masked, entropy, torch.inf)
        ordered, order = torch.sort(entropy, dim=1)
        below = (torch.cumsum(ordered, dim=1) < cfg.eb_threshold).sum(dim=1)
        counts = torch.minimum(below.clamp_min(1), n_masked)
        rank_kept = torch.arange(masked.shape[1], device=masked.device)[None] < counts[:, None]
        return torch.zeros_like(masked).scatter(1, order, rank_kept)
    # threshold_plus_best (Fast-dLLM v2): above the threshold, and always the most confident mask
    chosen = confidence > cfg.confidence_threshold
    best = confidence.argmax(dim=1, keepdim=True)
    return chosen.scatter(1, best, True) & masked


# ---- the decode -------------------------------------------------------------------------------------------------
@dataclass
class Rows:
    """The rows still decoding: their canvas [A, T] (prompt at column 0), prompt lengths, and on the host their last
    block index and each window's masks left (``masks_left[a][w]``, window w = columns [w * sub, (w + 1) * sub));
    where their random numbers come from, and which input row each is."""

    canvas: torch.Tensor
    prompt_lengths: torch.Tensor
    last_block: list[int]
    masks_left: list[list[int]]
    draws: Draws
    origin: list[int]

    def keep(self, index: list[int], cache: Any) -> "Rows":
        """Only the rows at ``index``, in the cache too (the rest do no more work)."""
        cache.select_rows(index)
        draws = self.draws if self.draws.rows is None else Draws(None, tuple(self.draws.rows[i] for i in index))
        return Rows(self.canvas[index], self.prompt_lengths[index], [self.last_block[i] for i in index],
                    [self.masks_left[i] for i in index], draws, [self.origin[i] for i in index])


def _right_align(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, total: int,
                 mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each left-padded prompt moved to column 0 of a [B, total] canvas of masks; and the prompt lengths."""
    batch, width = input_ids.shape
    lengths = (torch.full((batch,), width, device=input_ids.device) if attention_mask is None
               else attention_mask.sum(dim=1).to(torch.long))
    canvas = torch.full((batch, total), mask_id, dtype=torch.long, device=input_ids.device)
    columns = torch.arange(width, device=input_ids.device)[None]
    prompt = input_ids.gather(1, (columns + (width - lengths)[:, None]).clamp(max=width - 1))
    canvas[:, :width] = torch.where(columns < lengths[:, None], prompt, mask_id)
    return canvas, lengths


def _masks_per_window(canvas: torch.Tensor, mask_id: int, sub: int) -> list[list[int]]:
    """Each row's masks in each window of ``sub`` columns (one read)."""
    rows, width = canvas.shape
    return (canvas == mask_id).view(rows, width // sub, sub).sum(dim=-1).tolist()


@torch.no_grad()
def block_diffusion_generate(network: Any, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None,
                             cfg: BlockDiffusionConfig, row_seeds: Sequence[int] | None = None) -> DecodeOutput:
    """Generate ``gen_length`` tokens after each (left-padded) prompt, block by block; rows are cut after the first
    end-of-sequence id. With ``row_seeds`` a sampling config draws each row from its own generator, as alone."""
    require_filled(cfg, "block diffusion")
    validate_block_diffusion_config(cfg)
    check_inputs(input_ids, attention_mask)
    return _BlockDecode(network, input_ids, attention_mask, cfg, row_seeds).run()


class _BlockDecode:
    """One decode's state: the full canvas, the rows still running and their cache, the forwards spent."""

    def __init__(self, network: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 cfg: BlockDiffusionConfig, row_seeds: Sequence[int] | None) -> None:
        device = input_ids.device
        (n_rows, width), size, gen = input_ids.shape, cfg.block_length, cfg.gen_length
        canvas, self.lengths = _right_align(input_ids, attention_mask, width + gen + size, cfg.mask_id)
        self.host_lengths = [width] * n_rows if attention_mask is None else self.lengths.tolist()
        last_block = [(n + gen - 1) // size for n in self.host_lengths]  # every block up to the row's last token
        self.total = (max(last_block) + 1) * size
        self.sub = cfg.sub_block_length or size
        self.canvas = canvas[:, :self.total].contiguous()
        draws = Draws.for_batch(cfg.seed, row_seeds if cfg.temperature > 0 else None, n_rows, device)
        masks_left = _masks_per_window(self.canvas, cfg.mask_id, self.sub)
        self.rows = Rows(self.canvas.clone(), self.lengths, last_block, masks_left, draws, list(range(n_rows)))
        self.network, self.cfg, self.device = network, cfg, device
        self.cache = network.new_cache(n_rows, self.total)
        self.eos = torch.tensor(cfg.eos_ids, device=device)
        self.schedule = transfer_schedule(size, cfg.denoising_steps)
        self.row_nfe = [0.0] * n_rows  # each row's share of the network calls
        self.row_forwards = [0] * n_rows  # the forwards each row took part in
        self.nfe = 0
        self.written = 0  # columns whose K/V are in the cache

    def run(self) -> DecodeOutput:
        cfg, size = self.cfg, self.cfg.block_length
        prefill = min(self.host_lengths) // size * size
        if prefill and not cfg.fused_commit:
            self.first_token(self.forward(0, prefill, write=True), prefill)
        for block in range(prefill // size, self.total // size):
            start, end = block * size, (block + 1) * size
            if self.decode_block(start, end) or self.finish_block(block, start, end):
                break
        return _output(self.canvas, self.lengths, cfg.gen_length, cfg.eos_ids, self.nfe, self.row_nfe,
                       self.row_forwards)

    def forward(self, start: int, end: int, write: bool) -> torch.Tensor:
        """Logits of columns [start, end), their K/V kept if ``write``; with ``fused_commit`` the call also feeds and
        writes the columns before ``start`` not written yet."""
        self.nfe += 1
        for row in self.rows.origin:
            self.row_nfe[row] += 1 / len(self.rows.origin)
            self.row_forwards[row] += 1
        low = self.written if self.cfg.fused_commit else start
        keep = (end if write else start) - low
        # every row's columns are its positions (prompts start at column 0): a range, so no read decides the mask
        logits = self.network.block_forward(self.rows.canvas[:, low:end], range(low, end), self.cache,
                                            self.cfg.block_length, keep)
        self.written = low + keep
        return logits[:, start - low:]

    def first_token(self, logits: torch.Tensor, column: int) -> None:
        """The next block's first token from this forward's last logit, for rows whose prompt ends before it. The
        argmax may be the mask id itself, so the window's masks are read back."""
        if self.cfg.first_token_from_commit and column < self.total:
            rows, window = self.rows, column // self.sub  # column starts a block, so a window
            fill = rows.prompt_lengths <= column
            rows.canvas[:, column] = torch.where(fill, logits[:, -1].argmax(dim=-1), rows.canvas[:, column])
            left = (rows.canvas[:, column:column + self.sub] == self.cfg.mask_id).sum(dim=1)
            for row_left, n in zip(rows.masks_left, left.tolist()):
                row_left[window] = n

    def finish_block(self, block: int, start: int, end: int) -> bool:
        """The block's commit forward (none with ``fused_commit``, nor when every row stopped and
        ``commit_finished_block`` is off), then the rows done leave: those past their last block, known on the
        host, and those whose block holds an end of sequence, read once (not at all when the host needs no
        answer). True when no row is left."""
        cfg, rows = self.cfg, self.rows
        generated = torch.arange(start, end, device=self.device)[None] >= rows.prompt_lengths[:, None]
        holds_eos = (torch.isin(rows.canvas[:, start:end], self.eos) & generated).any(dim=1)
        commit_waits = not cfg.fused_commit and not cfg.commit_finished_block  # the commit depends on the answer
        stopped = holds_eos.tolist() if commit_waits else None
        if not cfg.fused_commit and (cfg.commit_finished_block or not all(stopped)):
            self.first_token(self.forward(start, end, write=True), end)
        done = [last <= block for last in rows.last_block]
        if not all(done):
            stopped = stopped if stopped is not None else holds_eos.tolist()
            done = [past or eos for past, eos in zip(done, stopped)]
        return self.stop(done)

    def stop(self, done: list[bool]) -> bool:
        """Rows that are done leave the batch (their tokens kept); True when none is left."""
        if not any(done):
            return False
        self.canvas[self.rows.origin] = self.rows.canvas
        if all(done):
            return True
        self.rows = self.rows.keep([row for row, gone in enumerate(done) if not gone], self.cache)
        return False

    def decode_block(self, start: int, end: int) -> bool:
        """Peek and commit until no row holds a mask in the block [start, end), sub-block by sub-block; True when
        ``eos_early_stop`` has stopped every row."""
        cfg, step = self.cfg, 0
        if cfg.edit_threshold is not None:
            self.edit_block(start, end)
            return False
        for low in range(start, end, self.sub):
            window, columns = low // self.sub, slice(low - start, low - start + self.sub)
            while any(row_left[window] for row_left in self.rows.masks_left):
                current = self.rows.canvas[:, low:low + self.sub]
                masked = current == cfg.mask_id
                logits = self.forward(start, end, write=False)
                if cfg.logit_shift:
                    logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
                drawing = [row for row, row_left in enumerate(self.rows.masks_left) if row_left[window]]
                proposal = propose(logits[:, columns], cfg, self.rows.draws, drawing)
                chosen = commit_rule(cfg, proposal, masked, step, self.schedule)
                tokens = never_the_mask(proposal, cfg.mask_id)
                updated = torch.where(chosen, tokens, current)
                self.rows.canvas[:, low:low + self.sub] = updated
                stopped = None
                if cfg.eos_early_stop:
                    committed_eos = chosen & torch.isin(tokens, self.eos)
                    stopped = _complete_to_eos(self.rows, end, self.eos, cfg.mask_id, committed_eos)
                if self.count_masks(window, step, updated, stopped):
                    return True
                step += 1
        return False

    def count_masks(self, window: int, step: int, updated: torch.Tensor, stopped: torch.Tensor | None) -> bool:
        """Each row's masks left in ``window`` (now ``updated``) after ``step``. The static rule's are known on the
        host (a row commits exactly min(its masks, the step's count): ``commit_rule`` caps the count and
        ``never_the_mask`` never commits the mask id); any other rule's are read, in the same read as the rows
        ``stopped`` mid-block (``eos_early_stop``; read as -1), which leave. True when every row has stopped."""
        cfg, rows = self.cfg, self.rows
        if cfg.remasking == "low_confidence_static" and stopped is None:
            want = self.schedule[min(step, len(self.schedule) - 1)]
            for row_left in rows.masks_left:
                row_left[window] = max(row_left[window] - want, 0)
            return False
        left = (updated == cfg.mask_id).sum(dim=1)
        counts = (left if stopped is None else torch.where(stopped, -1, left)).tolist()
        for row_left, n in zip(rows.masks_left, counts):
            row_left[window] = n
        return self.stop([n < 0 for n in counts])

    def edit_block(self, start: int, end: int) -> None:
        """LLaDA2.1's joint threshold (mask-to-token and token-to-token, as SGLang's ``JointThreshold`` runs it):
        each step fills masks by ``commit_rule`` and re-takes every generated token of the block whose proposal
        differs with confidence above ``edit_threshold``. A row is done when a step changes nothing, or after
        ``max_post_edit_steps`` steps with no mask left; whether all are is read once per step."""
        cfg, rows = self.cfg, self.rows
        columns = torch.arange(start, end, device=self.device)[None]
        editable = columns >= rows.prompt_lengths[:, None]
        done = torch.zeros(len(rows.origin), dtype=torch.bool, device=self.device)
        post_steps = torch.zeros_like(done, dtype=torch.long)
        for step in range(cfg.block_length + cfg.max_post_edit_steps):
            current = rows.canvas[:, start:end]
            masked = current == cfg.mask_id
            proposal = propose(self.forward(start, end, write=False), cfg, rows.draws, None)  # greedy: no draws
            tokens = never_the_mask(proposal, cfg.mask_id)
            filled = ~masked.any(dim=1)
            post_steps += (filled & ~done).long()
            done |= filled & (post_steps > cfg.max_post_edit_steps)
            fill = commit_rule(cfg, proposal, masked, step, self.schedule)
            edit = (proposal.confidence > cfg.edit_threshold) & (current != tokens) & editable & ~masked
            change = (fill | edit) & ~done[:, None]
            done |= ~change.any(dim=1)
            rows.canvas[:, start:end] = torch.where(change, tokens, current)
            if bool(done.all()):
                return


def _complete_to_eos(rows: Rows, end: int, eos: torch.Tensor, mask_id: int,
                     committed_eos: torch.Tensor) -> torch.Tensor:
    """[A] bool: rows that committed an end of sequence this step and hold no mask between their prompt and their
    first end of sequence (LLaDA2's ``eos_early_stop``)."""
    columns = torch.arange(end, device=rows.canvas.device)[None]
    generated = columns >= rows.prompt_lengths[:, None]
    first = torch.where(torch.isin(rows.canvas[:, :end], eos) & generated, columns, end).min(dim=1, keepdim=True)
    open_before = (rows.canvas[:, :end] == mask_id) & generated & (columns < first.values)
    return committed_eos.any(dim=1) & ~open_before.any(dim=1)


def _output(canvas: torch.Tensor, lengths: torch.Tensor, gen: int, eos_ids: Sequence[int], nfe: int,
            row_nfe: list[float], row_forwards: list[int]) -> DecodeOutput:
    """Each row's ``gen`` tokens after its prompt, cut after the first end-of-sequence id."""
    columns = lengths[:, None] + torch.arange(gen, device=canvas.device)[None]
    tokens = canvas.gather(1, columns)
    results = []
    for ids, spent, forwards in zip(tokens.tolist(), row_nfe, row_forwards):
        kept, found = cut_after_eos(ids, eos_ids)
        results.append(DecodeResult(token_ids=kept, nfe=spent, hit_max_tokens=not found, forwards=forwards))
    return DecodeOutput(rows=tuple(results), nfe=nfe, tokens=tokens)


BLOCK_DIFFUSION = Decoder("block-diffusion", BlockDiffusionConfig, block_diffusion_generate,
                          block_diffusion_at_canvas, validate_block_diffusion_config)
