"""The rules of block diffusion, shared by the static batch (``lockstep``) and rows in flight (``stream``): logits to
proposals, which masks a step commits, and the one-step updates of a window built from them, and a finished row's
result, each given the config's numbers and its ``strategy``'s choices. Each works on [A, W] rows of one window, so one
row or a batch call the same code; the schedule's count a step commits is one int for the batch (rows in lockstep) or
one per row (``RowWants``: rows in flight, each at its own step of its own block)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from models.decoders.block_diffusion.strategy import BlockDiffusionConfig, BlockStrategy, Editing
from models.decoders.contract import DecodeResult, committed
from models.decoders.sampling import Draws, llada_step_counts, top_k_filter, top_p_filter


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


def scheduled(step: int, schedule: Sequence[int]) -> int:
    """The schedule's count of masks to commit at ``step`` of a block (its last count past its end)."""
    return schedule[min(step, len(schedule) - 1)]


@dataclass(frozen=True)
class RowWants:
    """The schedule's count for each row when rows stand at different steps: ``counts`` [A] on the device, and its
    distinct ``values`` known on the host (a top-k takes its k from the host, one call per distinct count: at most
    two, since a schedule's counts differ by at most one)."""

    counts: torch.Tensor  # [A] long
    values: tuple[int, ...]


@dataclass(frozen=True)
class Window:
    """What a commit rule sees of a window: the proposals, which positions are masks, their confidences (-inf off
    the masks), how many each row holds, and the schedule's count for this step (one for every row, or ``RowWants``'
    [A, 1] counts with their distinct values)."""

    proposal: Proposal
    masked: torch.Tensor  # [A, W] bool
    confidence: torch.Tensor  # [A, W]
    n_masked: torch.Tensor  # [A]
    want: int | torch.Tensor  # an int, or [A, 1] long
    values: tuple[int, ...]  # the distinct counts among the rows


def _static(cfg: BlockDiffusionConfig, w: Window) -> torch.Tensor:
    """The schedule's count of the most confident masks. Rows wanting different counts each take the top-k of
    their own k (``torch.topk`` called with that k, as alone, so ties fall the same way)."""
    if isinstance(w.want, int):
        return _top_count(w.confidence, w.want, w.n_masked.clamp(max=w.want))
    counts = torch.minimum(w.n_masked, w.want[:, 0])
    chosen = None
    for k in w.values:
        top = _top_count(w.confidence, k, counts)
        chosen = top if chosen is None else torch.where(w.want == k, top, chosen)
    return chosen


def _dynamic(cfg: BlockDiffusionConfig, w: Window) -> torch.Tensor:
    """Every mask above the threshold when they reach the schedule's count, else the static rule."""
    confident = w.confidence > cfg.confidence_threshold
    enough = confident.sum(dim=1, keepdim=True) >= w.want
    return torch.where(enough, confident, _static(cfg, w))


def _sequential(cfg: BlockDiffusionConfig, w: Window) -> torch.Tensor:
    """The schedule's count of masks from the first one on, left to right."""
    columns = torch.arange(w.masked.shape[1], device=w.masked.device)[None]
    first = torch.where(w.masked, columns, w.masked.shape[1]).min(dim=1, keepdim=True).values
    return (columns >= first) & (columns < first + w.want) & w.masked


def _entropy_bounded(cfg: BlockDiffusionConfig, w: Window) -> torch.Tensor:
    """The lowest-entropy masks whose entropies sum below ``eb_threshold``, at least one."""
    probs = w.proposal.probs
    entropy = torch.where(w.masked, -(probs * probs.clamp_min(1e-12).log()).sum(dim=-1), torch.inf)
    ordered, order = torch.sort(entropy, dim=1)
    below = (torch.cumsum(ordered, dim=1) < cfg.eb_threshold).sum(dim=1)
    counts = torch.minimum(below.clamp_min(1), w.n_masked)
    rank_kept = torch.arange(w.masked.shape[1], device=w.masked.device)[None] < counts[:, None]
    return torch.zeros_like(w.masked).scatter(1, order, rank_kept)


def _threshold_plus_best(cfg: BlockDiffusionConfig, w: Window) -> torch.Tensor:
    """Fast-dLLM v2's: every mask above the threshold, and always the most confident one."""
    chosen = w.confidence > cfg.confidence_threshold
    return chosen.scatter(1, w.confidence.argmax(dim=1, keepdim=True), True) & w.masked


COMMIT_RULES: dict[str, Callable[[BlockDiffusionConfig, Window], torch.Tensor]] = {
    "low_confidence_static": _static, "low_confidence_dynamic": _dynamic, "sequential": _sequential,
    "entropy_bounded": _entropy_bounded, "threshold_plus_best": _threshold_plus_best}  # one per REMASKING


def commit_rule(cfg: BlockDiffusionConfig, proposal: Proposal, masked: torch.Tensor,
                want: int | RowWants) -> torch.Tensor:
    """[A, W] bool of the masks that take their proposed token, by ``cfg.remasking``'s rule, ``want`` the
    schedule's count this step (``scheduled``), for every row or per row. Never more than a row's masks: the
    published SDAR rules take a top-k over every position, which, once fewer masks remain than the step's count,
    overwrites committed (or prompt) tokens; here the count is capped at the masks left (docs/decoders.md)."""
    count, values = (want, (want,)) if isinstance(want, int) else (want.counts[:, None], want.values)
    window = Window(proposal, masked, torch.where(masked, proposal.confidence, -torch.inf), masked.sum(dim=1),
                    count, values)
    return COMMIT_RULES[cfg.remasking](cfg, window)


def masks_after_static(left: int, step: int, schedule: Sequence[int]) -> int:
    """A window's masks after a step of the static rule, known on the host without a read: a row commits exactly
    min(its masks, the step's count) (``commit_rule`` caps the count, ``never_the_mask`` never commits the mask)."""
    return max(left - scheduled(step, schedule), 0)


# ---- one step of a window, for one row or many ------------------------------------------------------------------
def peek_window(cfg: BlockDiffusionConfig, strategy: BlockStrategy, block_logits: torch.Tensor,
                current: torch.Tensor, offset: int, want: int | RowWants, draws: Draws,
                drawing: Sequence[int] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A peek's commits in one window: ``block_logits`` [A, block] are the peek's over the block, ``current`` [A, W]
    the window's tokens from column ``offset`` of the block. Returns the updated window, which masks took their
    proposal, and the proposals."""
    if strategy.scoring == "shifted":  # the first column keeps its own: its token came from the forward before
        block_logits = torch.cat([block_logits[:, :1], block_logits[:, :-1]], dim=1)
    return commit_window(cfg, block_logits[:, offset:offset + current.shape[1]], current, want, draws, drawing)


def commit_window(cfg: BlockDiffusionConfig, window_logits: torch.Tensor, current: torch.Tensor,
                  want: int | RowWants, draws: Draws,
                  drawing: Sequence[int] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``peek_window`` given each window position's own logits [A, W, vocab] (already shifted where the scoring
    shifts): the updated window, which masks took their proposal, and the proposals."""
    proposal = propose(window_logits, cfg, draws, drawing)
    chosen = commit_rule(cfg, proposal, current == cfg.mask_id, want)
    tokens = never_the_mask(proposal, cfg.mask_id)
    return torch.where(chosen, tokens, current), chosen, tokens


def edit_changes(cfg: BlockDiffusionConfig, editing: Editing, block_logits: torch.Tensor, current: torch.Tensor,
                 editable: torch.Tensor, want: int | RowWants) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaDA2.1's step over a block [A, block] (greedy): the proposals, and where they go — the masks
    ``commit_rule`` fills and every ``editable`` token whose proposal differs with confidence above
    ``editing.threshold``."""
    masked = current == cfg.mask_id
    proposal = propose(block_logits, cfg, Draws(None, None), None)
    tokens = never_the_mask(proposal, cfg.mask_id)
    fill = commit_rule(cfg, proposal, masked, want)
    edit = (proposal.confidence > editing.threshold) & (current != tokens) & editable & ~masked
    return tokens, fill | edit


def completes_to_eos(canvas: torch.Tensor, prompt_lengths: torch.Tensor, eos: torch.Tensor, mask_id: int,
                     committed_eos: torch.Tensor, ends: torch.Tensor | None = None) -> torch.Tensor:
    """[A] bool: rows of ``canvas`` [A, end] that committed an end of sequence this step (``committed_eos`` [A, W])
    and hold no mask between their prompt and their first end of sequence (LLaDA2's ``eos_early_stop``). ``ends``
    [A] (rows in flight, each at its own block): row a's canvas is its first ``ends[a]`` columns."""
    end = canvas.shape[1]
    columns = torch.arange(end, device=canvas.device)[None]
    generated = columns >= prompt_lengths[:, None]
    if ends is not None:
        generated = generated & (columns < ends[:, None])
    first = torch.where(torch.isin(canvas, eos) & generated, columns, end).min(dim=1, keepdim=True)
    open_before = (canvas == mask_id) & generated & (columns < first.values)
    return committed_eos.any(dim=1) & ~open_before.any(dim=1)


def row_result(ids: list[int], steps: list[int], edits: list[int], cfg: BlockDiffusionConfig,
               strategy: BlockStrategy, nfe: float, forwards: int) -> DecodeResult:
    """A finished row from its canvas past the prompt (per column: token, commit step, re-takes): cut after the
    first end of sequence, with the kept tokens' commit steps and, where it edits, their re-takes."""
    fields = committed(ids, steps, cfg.eos_ids)
    edited = sum(edits[:len(fields["token_ids"])]) if strategy.editing is not None else None
    return DecodeResult(nfe=nfe, forwards=forwards, edits=edited, **fields)
