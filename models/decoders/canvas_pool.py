"""The token state of a plain canvas decoder's rows in flight (LLaDA, Dream), kept on the device for batched rounds.

Every prompt's row is packed once when the stream starts (the prompt, then its canvas of masks, right-padded with
masks to the widest). The rows in flight live in two pools indexed by slot, their sequences and each position's
commit step, [slots, width + 1]: a joining row's packed row is copied into a free slot (all joining rows in one
copy), a leaving row gives its slot back, and a round's writes go to the pools by index. The last column belongs to
no row: a write meant for no position (a window cell outside a row's window) goes there.

The control state (prompt length, step counters) stays on the host with the decoder's rows, whose per-row ints a
round moves to the device in one transfer that does not wait for it (``sampling.host_ints``); ``results`` reads every
finished row back in one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from models.decoders.contract import DecodeResult, committed, read_rows
from models.decoders.sampling import host_ints
from models.networks.kv_buffer import SlotPool


class PooledRow(Protocol):
    """What the pool reads of a decoder's row: its prompt, its slot and what it cost (``flight.InFlight``)."""

    index: int
    slot: int
    prompt_len: int
    share: float
    forwards: int


@dataclass
class CanvasPool:
    """One stream's packed prompts and its rows' pools (see the module's docstring)."""

    packed: torch.Tensor  # [prompts, width]: each prompt then masks
    lengths: list[int]  # each prompt's length
    canvas: int
    x: torch.Tensor  # [slots, width + 1]
    steps: torch.Tensor  # [slots, width + 1]: the forward that last changed each position
    free: SlotPool
    joining: list[tuple[int, int]] = field(default_factory=list)  # (slot, prompt) not yet copied in

    @classmethod
    def build(cls, prompts: Sequence[torch.Tensor], canvas: int, mask_id: int, slots: int) -> "CanvasPool":
        packed = F.pad(pad_sequence(list(prompts), batch_first=True, padding_value=mask_id), (0, canvas),
                       value=mask_id)
        x = torch.full((slots, packed.shape[1] + 1), mask_id, dtype=packed.dtype, device=packed.device)
        return cls(packed, [len(p) for p in prompts], canvas, x, torch.zeros_like(x), SlotPool(slots))

    @property
    def width(self) -> int:
        """The widest row's columns (the scratch column is this index)."""
        return self.packed.shape[1]

    def take(self, prompt: int) -> int:
        """A free slot for prompt ``prompt``; its row is copied in by the next ``join``."""
        slot = self.free.take()
        self.joining.append((slot, prompt))
        return slot

    def join(self) -> None:
        """The joining rows' packed rows into their slots, their commit steps cleared: one copy for all of them."""
        if not self.joining:
            return
        slots, prompts = host_ints(self.joining, self.x.device).T
        self.x[slots, :self.width] = self.packed[prompts]
        self.steps[slots] = 0
        self.joining = []

    def ids(self, slots: Sequence[int], width: int, slot_index: torch.Tensor) -> torch.Tensor:
        """[n, width] of the rows at ``slots`` (``slot_index`` on the device): a view when the slots are 0 .. n-1
        in order, else one gather."""
        if list(slots) == list(range(len(slots))):
            return self.x[:len(slots), :width]
        return self.x.index_select(0, slot_index)[:, :width]

    def write(self, slot_index: torch.Tensor, cells: torch.Tensor, old: torch.Tensor, new: torch.Tensor,
              stamps: torch.Tensor) -> None:
        """Row i's tokens at columns ``cells[i]`` from ``old`` to ``new`` ([n, w] each), each changed position stamped
        with ``stamps[i]`` (the row's forward count), by index into the pools."""
        at = (slot_index[:, None], cells)
        self.steps[at] = torch.where(new != old, stamps[:, None], self.steps[at])
        self.x[at] = new

    def results(self, rows: Sequence[PooledRow], eos_ids: Sequence[int]) -> list[DecodeResult]:
        """The finished ``rows``' canvases, cut after the first end of sequence, read back in one transfer; their
        slots go back to the pool."""
        rows_at = host_ints([[row.slot, row.prompt_len] for row in rows], self.x.device)
        at = (rows_at[:, :1], rows_at[:, 1:] + torch.arange(self.canvas, device=self.x.device))
        ids, steps = read_rows(self.x[at], self.steps[at])
        for row in rows:
            self.free.give(row.slot)
        return [DecodeResult(nfe=row.share, forwards=row.forwards, **committed(row_ids, row_steps, eos_ids))
                for row, row_ids, row_steps in zip(rows, ids, steps)]

