"""Pure pieces shared by the diffusion decoders: noise, truncation, confidences, transfer schedules, right padding.

Everything here is a function of its arguments (randomness comes from an explicit ``torch.Generator``), so the
decoders stay reproducible and each piece can be tested against a hand computation.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F


# ---- network output ---------------------------------------------------------------------------------------------
def as_logits(output: Any) -> torch.Tensor:
    """Accept a bare logits tensor or any object with ``.logits`` (HF-style outputs)."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"network returned {type(output).__name__}; expected a logits Tensor or an object with .logits")
    return logits


def logits_at(forward: Callable[[torch.Tensor | None], torch.Tensor], cells: torch.Tensor, width: int,
              reads_cells: bool) -> torch.Tensor:
    """[n, k, V]: the logits at row i's columns ``cells[i]`` of a forward over [n, width] ids. Where the network
    reads cells, ``forward(flat cells of [n * width])`` computes the LM head there alone; else ``forward(None)``
    returns every column's and they are gathered. Rows in flight read a block of a canvas, not the canvas."""
    if reads_cells:
        flat = (cells + torch.arange(cells.shape[0], device=cells.device)[:, None] * width).reshape(-1)
        return forward(flat).view(*cells.shape, -1)
    logits = forward(None)
    return logits.gather(1, cells[..., None].expand(-1, -1, logits.shape[-1]))


def check_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
    """One-line errors for malformed decoder inputs: ids [B, P] and, if given, a mask of the same shape."""
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, P], got shape {tuple(input_ids.shape)}")
    if attention_mask is not None and attention_mask.shape != input_ids.shape:
        shapes = f"{tuple(attention_mask.shape)} vs {tuple(input_ids.shape)}"
        raise ValueError(f"attention_mask must have the shape of input_ids: {shapes}")


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator:
    """A generator for all of a decode's randomness; an unseeded one still draws from its own stream."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def row_seed(seed: int, identity: str) -> int:
    """A sample's own seed, from the run's seed and what identifies the sample (63 bits of a SHA-256)."""
    digest = hashlib.sha256(f"{seed}\0{identity}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def row_generators(row_seeds: Sequence[int] | None, batch: int,
                   device: torch.device | str) -> list[torch.Generator] | None:
    """One generator per row when per-row seeds are given (each row then draws its own numbers, the same in any
    batch); None otherwise (the decoder's one generator for the whole batch, as in the references)."""
    if row_seeds is None:
        return None
    if len(row_seeds) != batch:
        raise ValueError(f"row_seeds has {len(row_seeds)} seeds for a batch of {batch}")
    return [make_generator(int(seed), device) for seed in row_seeds]


@dataclass(frozen=True)
class Draws:
    """Where a decode step's random numbers come from: one generator for the whole batch (the references' way),
    or one per row, in which case the step runs row by row so each row draws exactly what it would draw alone."""

    shared: torch.Generator | None
    rows: tuple[torch.Generator, ...] | None

    @classmethod
    def for_batch(cls, seed: int | None, row_seeds: Sequence[int] | None, batch: int,
                  device: torch.device | str) -> "Draws":
        rows = row_generators(row_seeds, batch, device)
        return cls(None, tuple(rows)) if rows is not None else cls(make_generator(seed, device), None)

    def of(self, row: int) -> torch.Generator | None:
        """The generator row ``row`` draws from: its own, or the one the batch shares."""
        return self.shared if self.rows is None else self.rows[row]

    def by_row(self, step: Callable[..., torch.Tensor], batched: tuple[torch.Tensor, ...], *args: Any) -> torch.Tensor:
        """``step(*batched, *args, generator)`` on the whole batch, or on each row's slice of ``batched`` with its
        own generator, the rows' results stacked back in order."""
        if self.rows is None:
            return step(*batched, *args, self.shared)
        return torch.cat([step(*(t[row:row + 1] for t in batched), *args, generator)
                          for row, generator in enumerate(self.rows)])

    def by_open_row(self, step: Callable[..., torch.Tensor], batched: tuple[torch.Tensor, ...], open_rows: torch.Tensor,
                    keep: torch.Tensor, *args: Any) -> torch.Tensor:
        """``by_row`` for a step that changes nothing in a row with nothing left to commit: with per-row generators
        only the rows ``open_rows`` marks ([B] or [B, 1] bool) take it, a closed row's result is its row of
        ``keep``, so a row draws only what it draws alone (a static batch steps until its last row is done). One
        generator for the batch: the whole batch steps, as ``by_row``. Reads ``open_rows`` back only per row."""
        if self.rows is None:
            return step(*batched, *args, self.shared)
        opened = open_rows.reshape(-1).tolist()
        return torch.cat([step(*(t[row:row + 1] for t in batched), *args, generator) if opened[row]
                          else keep[row:row + 1] for row, generator in enumerate(self.rows)])


def row_starts(attention_mask: torch.Tensor | None, batch: int) -> list[int]:
    """Where each left-padded row's real tokens begin: per-row draws cover only those, so padding moves nothing."""
    if attention_mask is None:
        return [0] * batch
    return (attention_mask.shape[1] - attention_mask.sum(dim=1)).tolist()


# ---- sampling ---------------------------------------------------------------------------------------------------
def add_gumbel_noise(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """LLaDA's Gumbel-max form, in float64: argmax of exp(l) / (-log U)^T is a sample from softmax(l / T).

    At T = 0 the logits tensor itself is returned (not a copy), as in the reference; LLaDA's
    ``confidence_eos_eot_inf`` behaviour depends on that aliasing.
    """
    if temperature == 0:
        return logits
    logits64 = logits.to(torch.float64)
    noise = torch.rand(logits64.shape, dtype=torch.float64, device=logits64.device, generator=generator)
    return logits64.exp() / (-torch.log(noise)) ** temperature


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest prefix of the sorted distribution whose mass reaches ``top_p`` (the crossing token kept).

    Removed entries get ``finfo.min`` (not -inf), as in Dream's sampler.
    """
    sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)
    cumulative = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
    remove_sorted = cumulative > top_p
    remove_sorted[..., 1:] = remove_sorted[..., :-1].clone()
    remove_sorted[..., 0] = False
    remove = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, sorted_idx, remove_sorted)
    return logits.masked_fill(remove, torch.finfo(logits.dtype).min)


def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep entries at least as large as the k-th largest (ties at the boundary survive)."""
    k = min(top_k, logits.size(-1))
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)


def sample_categorical(probs: torch.Tensor, generator: torch.Generator | None) -> torch.LongTensor:
    """One draw per row of ``probs`` [N, V], the way ``torch.distributions.Categorical.sample`` draws it."""
    normalised = probs / probs.sum(-1, keepdim=True)
    return torch.multinomial(normalised.reshape(-1, probs.size(-1)), 1, True, generator=generator).reshape(
        probs.shape[:-1]
    )


def passes_simplex_check(probs: torch.Tensor) -> bool:
    """The validation ``Categorical(probs=...)`` runs; Dream falls back to argmax for the whole call if it fails."""
    normalised = probs / probs.sum(-1, keepdim=True)
    return bool(torch.all((normalised >= 0).all(-1) & ((normalised.sum(-1) - 1).abs() < 1e-6)))


# ---- confidences (higher = surer) -------------------------------------------------------------------------------
def max_prob_confidence(probs: torch.Tensor) -> tuple[torch.Tensor, torch.LongTensor]:
    """Top probability and its token (argmax returns the first maximum)."""
    confidence, tokens = probs.max(dim=-1)
    return confidence, tokens


def margin_confidence(probs: torch.Tensor) -> torch.Tensor:
    """p1 - p2, the gap between the two most likely tokens."""
    top2 = torch.topk(probs, 2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


def neg_entropy_confidence(probs: torch.Tensor, epsilon: float = 1e-10) -> torch.Tensor:
    """sum p log(p + eps): minus the entropy, so a peaked distribution scores highest. The same kernels as the
    reference's ``torch.sum(probs * torch.log(probs + epsilon))``, in place on one buffer instead of three."""
    terms = probs + epsilon
    return terms.log_().mul_(probs).sum(dim=-1)


# ---- transfer schedules -----------------------------------------------------------------------------------------
def llada_transfer_counts(mask_counts: torch.Tensor, steps: int) -> torch.LongTensor:
    """Split each row's masks over ``steps``: n // steps each, one more for the first n % steps steps."""
    counts = mask_counts.to(torch.long).reshape(-1, 1)
    base = counts // steps
    remainder = counts % steps
    step_index = torch.arange(steps, device=counts.device).unsqueeze(0)
    return base + (step_index < remainder).to(torch.long)


def dream_timesteps(steps: int, eps: float, device: torch.device | str) -> torch.Tensor:
    """Dream's time grid t_0 = 1 > ... > t_steps = eps (float32, on the decode's device as in the reference)."""
    return torch.linspace(1, eps, steps + 1, device=device)


def dream_transfer_count(mask_index: torch.Tensor, t: torch.Tensor, s: torch.Tensor, last: bool) -> int:
    """Tokens to commit per row this step: floor(mean masks per row * (1 - s/t)); all remaining at the last step.

    The mean over rows is the reference's; it equals every row's count when all rows share one canvas length.
    """
    mean_masks = mask_index.sum() / mask_index.shape[0]
    if last:
        return int(mean_masks)
    return int(mean_masks * (1 - s / t))


def llada_step_counts(masks: int, steps: int) -> list[int]:
    """``llada_transfer_counts`` of one row, in Python: for a block every row starts with ``masks`` masks, the
    schedule is the batch's and known to the host, so no step reads a count back from the device."""
    base, remainder = divmod(masks, steps)
    return [base + int(step < remainder) for step in range(steps)]


def dream_transfer_count_of(masks: torch.Tensor, batch: int, t: torch.Tensor, s: torch.Tensor,
                            last: bool) -> torch.Tensor:
    """``dream_transfer_count`` from the batch's mask total (a 0-d tensor), the same float32 arithmetic left on the
    device as a long, so the host can read it in one transfer with the other values it needs."""
    mean_masks = masks / batch
    return (mean_masks if last else mean_masks * (1 - s / t)).long()


def dream_masks_and_count(mask_index: torch.Tensor, t: torch.Tensor, s: torch.Tensor, last: bool) -> tuple[int, int]:
    """The batch's mask total and ``dream_transfer_count``, read back in one transfer: a step's one host read. The
    total sizes the masks' logits; neither can be tracked on the host, as a network may propose the mask id."""
    total = mask_index.sum()
    masks, count = torch.stack([total, dream_transfer_count_of(total, mask_index.shape[0], t, s, last)]).tolist()
    return masks, count


# ---- masks without a host read ----------------------------------------------------------------------------------
def mask_order(mask_index: torch.Tensor, masks: int) -> torch.LongTensor:
    """Flat indices of the ``masks`` True entries of ``mask_index`` in row-major order, as ``nonzero`` gives them:
    a stable sort puts them first, so a host that knows how many there are need not wait for ``nonzero``. Sorted
    as bytes, which every device's sort takes."""
    return torch.argsort(mask_index.reshape(-1).to(torch.uint8), descending=True, stable=True)[:masks]


def spread(values: torch.Tensor, order: torch.LongTensor, shape: torch.Size, fill: float | int) -> torch.Tensor:
    """A ``shape`` tensor of ``fill`` with ``values`` at the flat indices ``order``: ``out[mask] = values`` for the
    order ``mask_order`` gives, without the read a boolean index needs."""
    out = torch.full((math.prod(shape),), fill, dtype=values.dtype, device=values.device)
    return out.scatter_(0, order, values).view(shape)


def right_padded(rows: Sequence[torch.Tensor], fill: int | bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows [1, w] stacked right-padded to the widest, and the [n, W] mask of real columns (None when no row is
    padded). Right, not left: a row's tokens keep the columns, so the positions, they have alone, whatever the
    network's default positions, and a bidirectional network masks the pad keys from every real query."""
    widths = [row.shape[1] for row in rows]
    width = max(widths)
    ids = torch.cat([F.pad(row, (0, width - w), value=fill) for row, w in zip(rows, widths)])
    if min(widths) == width:
        return ids, None
    real = torch.arange(width, device=ids.device) < torch.tensor(widths, device=ids.device)[:, None]
    return ids, real.long()


# ---- commits of rows at different counts ------------------------------------------------------------------------
def host_ints(values: Sequence[Any], device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Host values (nested lists) as a tensor on ``device``, in one transfer that does not wait: on CUDA a copy
    from pageable memory waits for the device's queue to drain (as a read does), one from pinned memory is queued
    with the work."""
    tensor = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor if device.type == "cpu" else tensor.to(device)


def topk_ignores_padding(device: torch.device, count: int, width: int) -> bool:
    """Whether ``torch.topk``'s pick of ``count`` in a row of ``width`` columns stays the same with -inf columns
    after them, so rows of different widths can share one call. On the CPU when ``count * 64 <= width``: topk then
    runs ``std::partial_sort``, whose heap never takes a trailing -inf; below it runs ``std::nth_element``, whose pick
    among equal values moves with the row's length. On CUDA always: its radix select takes equal values in index
    order (checked on the device by tests/cuda/test_top_counts_on_device.py)."""
    if device.type == "cpu":
        return count * 64 <= width
    return device.type == "cuda"


def top_counts(confidence: torch.Tensor, counts: Sequence[int], widths: Sequence[int]) -> torch.Tensor:
    """[n, C] bool: in each row r the columns ``torch.topk(confidence[r:r+1, :widths[r]], counts[r])`` picks on the
    row alone, ties included (a count of 0 picks none). Columns at or past a row's width must hold -inf.

    One topk per count over the rows whose pick ignores trailing columns (``topk_ignores_padding``), one per count
    and width for the others: a batch of rows at different steps (a few counts) costs a few calls, not one per row.
    Each call runs on every row; a row keeps the pick of its own call (the calls of one count stacked and gathered
    at once) and rows of other counts send theirs to a scratch column, so no row is gathered apart."""
    rows, columns = confidence.shape
    device = confidence.device
    calls: dict[int, dict[int, int]] = {}  # count -> the width each of its calls sees -> the call's place
    place = []  # per row: (count, its call's place)
    for count, width in zip(counts, widths):
        seen = columns if count == 0 or topk_ignores_padding(device, count, width) else width
        place.append((count, calls.setdefault(count, {}).setdefault(seen, len(calls[count]))))
    calls.pop(0, None)
    chosen = torch.zeros((rows, columns + 1), dtype=torch.bool, device=device)
    if not calls:
        return chosen[:, :columns]
    uniform = len(calls) == 1 and all(count == place[0][0] for count, _ in place)
    table = None if uniform and len(next(iter(calls.values()))) == 1 else host_ints(
        [[at if count == own else -1 for own in calls] for count, at in place], device)  # [rows, counts]
    picks = []
    for c, (count, seen) in enumerate(calls.items()):
        pick = [torch.topk(confidence[:, :width], count).indices for width in seen]
        if len(pick) > 1:  # each row's own call of this count
            at = table[:, c].clamp(min=0)[None, :, None].expand(1, rows, count)
            pick = [torch.stack(pick).gather(0, at)[0]]
        picks.append(pick[0] if uniform else torch.where(table[:, c:c + 1] >= 0, pick[0], columns))
    return chosen.scatter_(1, torch.cat(picks, dim=1) if len(picks) > 1 else picks[0], True)[:, :columns]
