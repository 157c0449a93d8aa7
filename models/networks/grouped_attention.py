"""Attention for rows that share a prefix and then split into independent groups (ReFusion's in-slot completion: a
group is a slot), without attending over the other groups' columns.

Row b's cache holds ``lengths[b]`` entries: the first ``prefix[b]`` are seen by all its new tokens; after them come
``groups[b]`` runs of ``owned[b]`` entries, one per group in order. Its new tokens are ``groups[b]`` consecutive
windows of ``window[b]`` tokens (written at columns ``lengths[b] ...``). A new token sees the prefix, its group's
owned entries and its group's window up to itself. A plain causal row is one group owning nothing whose prefix is
the whole cache.

Two ways to compute it, the same numbers up to float rounding:
  * ``dense_mask``: one SDPA over every key column with a [B, 1, Q, K] mask. With k groups, each query scores the
    k - 1 other groups' columns only to mask them out, and the mask itself is Q x K entries built per forward.
  * ``grouped_attention``: the queries against the shared prefix (no mask when every row's prefix has one length),
    then each group as its own batch entry against its own owned and window entries (a [window, owned + window]
    mask), the two merged by their log-sum-exp. This needs the kernel's log-sum-exp, which torch exposes on the
    CPU (``aten::_scaled_dot_product_flash_attention_for_cpu``), so other devices take the dense mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from models.networks.common import additive_mask


@dataclass(frozen=True)
class GroupedWindows:
    """Per row (tuples of length B): cache entries before the forward, shared prefix, groups, entries each group owns
    after the prefix, and new tokens per group; ``width`` is the padded number of new tokens per row."""

    lengths: tuple[int, ...]
    prefix: tuple[int, ...]
    groups: tuple[int, ...]
    owned: tuple[int, ...]
    window: tuple[int, ...]
    width: int

    def __post_init__(self) -> None:
        for b, (n, p, g, o, w) in enumerate(zip(self.lengths, self.prefix, self.groups, self.owned, self.window)):
            if min(p, o) < 0 or min(g, w) < 1 or n != p + g * o or g * w > self.width:
                raise ValueError(f"row {b}: {g} groups of {w} new tokens owning {o} entries each do not fit a cache "
                                 f"of {n} entries with a prefix of {p} and {self.width} new tokens")

    @classmethod
    def causal(cls, lengths: list[int], n_new: list[int], width: int) -> "GroupedWindows":
        """Plain causal rows: one group each, the whole cache as its prefix."""
        return cls(tuple(lengths), tuple(lengths), (1,) * len(lengths), (0,) * len(lengths), tuple(n_new), width)

    @property
    def key_len(self) -> int:
        return max(self.lengths) + self.width


def dense_mask(layout: GroupedWindows, device: torch.device) -> Tensor:
    """[B, 1, width, key_len] bool, all rows at once from five integers each. Every key column gets a group (the
    prefix: seen by all; an owned entry: its group's; a new entry: its window's; pads a group of their own, so no real
    query sees a pad) and a query sees its group's owned and new entries at or before it."""
    never, pad = -3, -2
    width, key_len = layout.width, layout.key_len
    per_row = [layout.lengths, layout.prefix, [g * w for g, w in zip(layout.groups, layout.window)], layout.window,
               [max(o, 1) for o in layout.owned]]
    length, seen, n_new, window, owned = torch.tensor(per_row, device=device)[:, :, None, None]  # each [B, 1, 1]
    q = torch.arange(width, device=device)[:, None]
    c = torch.arange(key_len, device=device)
    j = c - length  # the new entry a column holds, when >= 0
    query_group = torch.where(q < n_new, q // window, pad)
    key_group = torch.where(c < seen, never, torch.where(c < length, (c - seen) // owned,
                            torch.where(j < n_new, j // window, torch.where(j < width, pad, never))))
    return ((c < seen) | ((key_group == query_group) & ((c < length) | (j <= q))))[:, None]


# Break-even of the grouped form on one CPU thread, measured on the tiny Qwen3 (4 heads of 16, 2 layers): the dense
# kernel spends ~2 ns a score; the grouped form's gathers, merge and second kernel cost ~0.3 ms a layer and its plan
# ~0.2 ms a forward. With this bound ReFusion at canvas 1024 takes 0.8-0.9x of its all-dense decode time; canvas 512
# stays dense.
MIN_SKIPPED_SCORES = 1 << 18


def grouping_pays(layout: GroupedWindows, n_heads: int, device: torch.device) -> bool:
    """Whether ``grouped_attention`` is worth its extra work: on the CPU, with every row split into groups (a plain
    row's one long window would pad every group to its length), when the scores it skips (each query head against
    the other groups' columns) number ``MIN_SKIPPED_SCORES`` or more."""
    if device.type != "cpu" or min(layout.groups) < 2 or min(layout.prefix) < 1:
        return False
    own = max(o + w for o, w in zip(layout.owned, layout.window))
    skipped = layout.key_len - max(layout.prefix) - own  # columns each query no longer scores
    return len(layout.lengths) * n_heads * layout.width * skipped >= MIN_SKIPPED_SCORES


@dataclass(frozen=True)
class GroupedPlan:
    """Index tensors of one forward, shared by every layer. Queries are in the stacked grouped-query layout: each kv
    head's ``rep`` q heads one after another along the query axis (position r * width + j), so no kv head is copied.
    G = most groups, Wg = widest window, Ko = most own keys (owned entries, then the window)."""

    prefix_len: int
    prefix_mask: Tensor | None  # [B, 1, 1, prefix_len] additive, None when every prefix has one length
    own_columns: Tensor  # [B, G * Ko] cache column of each group's own keys
    own_mask: Tensor  # [B * G * Hkv, rep * Wg, Ko] additive, one copy per batch entry of the groups' kernel
    query_index: Tensor  # [B, G * rep * Wg] the stacked query feeding group g's (r, i) query
    output_index: Tensor  # [B, rep * width] where each stacked query's output sits in the [B, G * rep * Wg] layout
    groups: int
    window: int
    own_keys: int
    rep: int


def plan_grouped(layout: GroupedWindows, n_heads: int, n_kv: int, dtype: torch.dtype,
                 device: torch.device) -> GroupedPlan:
    """Build the gathers and masks of ``grouped_attention`` for ``n_heads`` q heads over ``n_kv`` kv heads."""
    rep = n_heads // n_kv
    n_groups, widest = max(layout.groups), max(layout.window)
    own = max(o + w for o, w in zip(layout.owned, layout.window))
    per_row = [layout.lengths, layout.prefix, layout.groups, layout.owned, layout.window]
    length, prefix, groups, owned, window = torch.tensor(per_row, device=device)[:, :, None, None]  # each [B, 1, 1]
    g = torch.arange(n_groups, device=device)[:, None]
    k = torch.arange(own, device=device)
    columns = torch.where(k < owned, prefix + g * owned + k, length + g * window + k - owned)
    own_columns = torch.where((g < groups) & (k < owned + window), columns, 0).flatten(1)
    i = torch.arange(widest, device=device)[:, None]
    sees = (k <= torch.minimum(owned + i, owned + window - 1)).repeat(1, rep, 1)  # [B, rep * Wg, Ko]
    own_mask = additive_mask(sees, dtype)[:, None, None].expand(-1, n_groups, n_kv, -1, -1).reshape(-1, rep * widest,
                                                                                                   own)
    r = torch.arange(rep, device=device)[:, None]
    i = i.T  # [1, Wg]
    source = r * layout.width + g[:, :, None] * window[..., None] + i  # [B, G, rep, Wg]
    used = (g[:, :, None] < groups[..., None]) & (i < window[..., None])
    query_index = torch.where(used, source, 0).flatten(1)
    j = torch.arange(layout.width, device=device)
    w = window[:, :, 0]  # [B, 1]
    target = (j // w)[:, None] * (rep * widest) + r * widest + (j % w)[:, None]  # [B, rep, width]
    output_index = torch.where((j < groups[:, :, 0] * w)[:, None], target, 0).flatten(1)
    prefix_len = max(layout.prefix)
    prefix_mask = None
    if min(layout.prefix) != prefix_len:
        shared = torch.arange(prefix_len, device=device) < prefix[:, :, 0]  # [B, prefix_len]
        prefix_mask = additive_mask(shared, dtype)[:, None, None]
    return GroupedPlan(prefix_len, prefix_mask, own_columns, own_mask, query_index, output_index, n_groups, widest,
                       own, rep)


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """SDPA's CPU flash kernel, which also returns each query's log-sum-exp of its scores ([..., Q], fp32)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask)


def _attend_small(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``_attend`` written out, for many tiny batch entries (the groups), where the flash kernel's per-entry setup
    costs more than the arithmetic."""
    scores = torch.baddbmm(mask, q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2), alpha=q.shape[-1] ** -0.5)
    lse = scores.logsumexp(-1, keepdim=True)
    out = torch.bmm((scores - lse).exp(), v.flatten(0, 1))
    return out.view(*q.shape[:-1], v.shape[-1]), lse.view(q.shape[:-1])


def grouped_attention(q: Tensor, keys: Tensor, values: Tensor, plan: GroupedPlan) -> Tensor:
    """q [B, H, width, D] against the cache ``keys``/``values`` [B, Hkv, >= key_len, D] that already hold this
    forward's entries; q head j uses kv head j // (H / Hkv). Returns [B, H, width, D]."""
    b, n_heads, width, d = q.shape
    n_kv, g, wg, ko = keys.shape[1], plan.groups, plan.window, plan.own_keys
    stacked = q.reshape(b, n_kv, plan.rep * width, d)
    out_prefix, lse_prefix = _attend(stacked, keys[:, :, :plan.prefix_len], values[:, :, :plan.prefix_len],
                                     plan.prefix_mask)
    # each group alone: one batch entry per (row, group), against its own keys
    rows = torch.arange(b, device=q.device)[:, None]
    group_q = stacked[rows, :, plan.query_index].view(b * g, plan.rep * wg, n_kv, d).transpose(1, 2)
    own_k, own_v = (cache[rows, :, plan.own_columns].view(b * g, ko, n_kv, d).transpose(1, 2)
                    for cache in (keys, values))
    out_own, lse_own = _attend_small(group_q, own_k, own_v, plan.own_mask)
    out_own = out_own.reshape(b, g, n_kv, -1, d).transpose(1, 2).reshape(b, n_kv, -1, d)[rows, :, plan.output_index]
    lse_own = lse_own.reshape(b, g, n_kv, -1).transpose(1, 2).reshape(b, n_kv, -1)[rows, :, plan.output_index]
    out_own, lse_own = out_own.transpose(1, 2), lse_own.transpose(1, 2)
    # softmax over both key sets = each part's softmax weighted by its share of the total exp-sum
    top = torch.maximum(lse_prefix, lse_own)
    w_prefix, w_own = (lse_prefix - top).exp(), (lse_own - top).exp()
    total = w_prefix + w_own
    merged = out_prefix * (w_prefix / total)[..., None] + out_own * (w_own / total)[..., None]
    return merged.to(q.dtype).view(b, n_heads, width, d)
