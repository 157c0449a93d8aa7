"""The independent computations the ReFusion tests compare the decoder with (no KV reuse anywhere):

  * ``full_forward``: one forward over the reordered buffer with its own position ids and a 4-D mask saying which
    entries each entry attended to when its K/V was written (``grow_visibility`` builds it as commits happen);
  * ``Tracker``: an ``on_commit`` hook checking the buffer invariants after every commit;
  * ``reference_refusion``: the algorithm written out again from the spec with plain lists, one full forward per
    slot row, so its tokens and forward count are what the reference algorithm yields.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from models.decoders.refusion.decoder import CommitEvent, RefusionConfig


def full_forward(model, tokens: list[int], positions: list[int], visible: torch.Tensor | None = None):
    """One forward over the whole sequence, no prior cache; ``visible[q, kv]`` (bool) or plain causal. -> logits, cache."""
    ids, pos = torch.tensor([tokens]), torch.tensor([positions])
    mask = torch.ones_like(ids) if visible is None else visible[None, None]
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, position_ids=pos, attention_mask=mask, cache=cache, use_cache=True)
    return out.logits[0], cache


def grow_visibility(visible: torch.Tensor, row_lengths: list[int]) -> torch.Tensor:
    """Append entries in rows: each sees everything before the commit and the earlier entries of its own row."""
    base, n = visible.shape[0], sum(row_lengths)
    out = torch.zeros(base + n, base + n, dtype=torch.bool)
    out[:base, :base] = visible
    out[base:, :base] = True
    start = base
    for length in row_lengths:
        out[start:start + length, start:start + length] = torch.ones(length, length).tril().bool()
        start += length
    return out


class Tracker:
    """``on_commit`` hook: checks invariant 3 after every commit and rebuilds the buffer's visibility."""

    def __init__(self, prompt_len: int, gen_length: int):
        self.prompt_len, self.gen_length = prompt_len, gen_length
        self.visible = torch.ones(prompt_len, prompt_len).tril().bool()
        self.events: list[CommitEvent] = []
        self.kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = []

    def __call__(self, event: CommitEvent) -> None:
        p, g = self.prompt_len, self.gen_length
        assert event.kv[0][0].shape[2] == len(event.tokens) == len(event.positions)
        assert len(set(event.positions)) == len(event.positions), "a position was committed twice"
        assert list(event.positions[:p]) == list(range(p))
        assert all(p <= q < p + g for q in event.positions[p:])
        if self.events:
            before = self.events[-1]
            assert event.tokens[: len(before.tokens)] == before.tokens, "a committed token changed"
            assert event.positions[: len(before.positions)] == before.positions
        if event.path == "verify":
            rows = [event.n_new]
        else:
            full, rest = divmod(event.n_new, event.slot_size)
            rows = [event.slot_size] * full + ([rest] if rest else [])
        self.visible = grow_visibility(self.visible, rows)
        self.events.append(event)
        self.kv.append(event.kv)


def reference_refusion(model, prompt: torch.Tensor, cfg: RefusionConfig):
    """The algorithm of spec 1.2 (with 1.6a/1.6h fixed), recomputing every forward from scratch. -> ids, nfe, tpf."""
    ss, eos, thr_slot, thr_tok = cfg.slot_size, cfg.eos_id, cfg.slot_threshold, cfg.token_threshold
    tokens, positions = prompt[0].tolist(), list(range(prompt.shape[1]))
    visible = torch.ones(len(tokens), len(tokens)).tril().bool()

    def logits_of(extra_tokens, extra_pos):
        n = len(extra_tokens)
        vis = grow_visibility(visible, [n])
        return full_forward(model, tokens + extra_tokens, positions + extra_pos, vis)[0][-n:]

    def prob(row_logits, token):
        return torch.softmax(row_logits, -1)[token].item()

    nfe, iterations, tpf = 0, 0, 0.0
    block_len = cfg.gen_length // cfg.serial_num_blocks
    for b in range(cfg.serial_num_blocks):
        first = prompt.shape[1] + b * block_len
        slots = [list(range(s, s + ss)) for s in range(first, first + block_len, ss)]  # R, in position order
        eos_flag = False
        while slots:
            flat_pos = [q for s in slots for q in s]
            plan = logits_of([cfg.mask_id] * len(flat_pos), flat_pos)
            nfe += 1
            drafts = plan.argmax(-1).tolist()
            conf = [prob(plan[i], drafts[i]) for i in range(len(drafts))]
            first_conf = [conf[j * ss] for j in range(len(slots))]
            chosen = [j for j, c in enumerate(first_conf) if c > thr_slot] or [max(range(len(slots)), key=lambda j: (first_conf[j], -j))]
            rows = [drafts[j * ss:(j + 1) * ss] for j in chosen]
            row_pos = [slots[j] for j in chosen]
            cat_tok, cat_pos = [t for r in rows for t in r], [q for r in row_pos for q in r]
            ver = logits_of(cat_tok, cat_pos)
            nfe += 1
            accept = []
            for i, t in enumerate(cat_tok):
                accept.append(i % ss == 0 or prob(ver[i - 1], t) > thr_tok)
            prefix = next((i for i, a in enumerate(accept) if not a), len(accept))
            eos_at = next((i for i in range(prefix) if cat_tok[i] == eos), None)
            iterations += 1
            if eos_at is not None or prefix >= ss:
                n_commit = eos_at + 1 if eos_at is not None else prefix // ss * ss
                n_done = -(-n_commit // ss)
                visible = grow_visibility(visible, [n_commit])
                tokens, positions = tokens + cat_tok[:n_commit], positions + cat_pos[:n_commit]
                tpf += ss * n_done / 2
                limit = chosen[n_done - 1] if eos_at is not None else len(slots)
                slots = [s for j, s in enumerate(slots) if j < limit and j not in chosen[:n_done]]
                eos_flag |= eos_at is not None
                continue
            # in-slot completion, each row against the buffer and its own tokens only
            tags = []
            for r in range(len(rows)):
                acc = accept[r * ss:(r + 1) * ss]
                run = next((i for i, a in enumerate(acc) if not a), ss)
                tags.append([1] * run + [0] * (ss - run))
            start, passes, eos_row = 0, 0, None
            while any(0 in t for t in tags):
                new_rows = []
                for r, row in enumerate(rows):
                    masked = [t if tags[r][i] else cfg.mask_id for i, t in enumerate(row)]
                    lg = logits_of(masked[: ss], row_pos[r])[start:]
                    new_rows.append(row[:start] + [t if tags[r][start + i] else int(lg[i].argmax())
                                                   for i, t in enumerate(row[start:])])
                rows = new_rows
                for r, row in enumerate(rows):
                    lg = logits_of(row, row_pos[r])
                    old = tags[r]
                    acc = [old[i] == 1 or (i > 0 and old[i - 1] == 1) or (i > start and prob(lg[i - 1], row[i]) > thr_tok)
                           for i in range(ss)]
                    acc[start] = True
                    run = next((i for i, a in enumerate(acc) if not a), ss)
                    tags[r] = [1] * run + [0] * (ss - run)
                nfe += 2
                passes += 1
                hit = [r for r, row in enumerate(rows) if any(row[i] == eos and tags[r][i] for i in range(start, ss))]
                if hit:
                    eos_row = hit[0]
                    rows, row_pos, tags = rows[: eos_row + 1], row_pos[: eos_row + 1], tags[: eos_row + 1]
                    tags[eos_row] = [1] * ss
                newly = min(sum(t[start:]) for t in tags)
                start += newly - (1 if any(0 in t for t in tags) else 0)
            flat = [t for r in rows for t in r]
            n_keep = next((i + 1 for i, t in enumerate(flat) if t == eos), len(flat))
            lengths = [min(ss, max(0, n_keep - r * ss)) for r in range(len(rows))]
            visible = grow_visibility(visible, [n for n in lengths if n])
            tokens = tokens + flat[:n_keep]
            positions = positions + [q for r in row_pos for q in r][:n_keep]
            tpf += ss * len(chosen) / (2 * passes + 2)
            limit = chosen[eos_row] if eos_row is not None else len(slots)
            slots = [s for j, s in enumerate(slots) if j < limit and j not in chosen]
            eos_flag |= eos_row is not None
        if eos_flag:
            break
    gen = [t for _, t in sorted(zip(positions[prompt.shape[1]:], tokens[prompt.shape[1]:]))]
    cut = next((i + 1 for i, t in enumerate(gen) if t == eos), len(gen))
    return gen[:cut], nfe, tpf / iterations
