"""Rows in flight, the device's state: every row's tokens, commit steps and re-takes in one pool tensor indexed by
slot (allocated once per stream, beside the KV cache's slots), and the host ints a round sends in one transfer.

A joining row's slot is reset and its prompt written in O(1) ops for all joiners at once; a round gathers and
scatters the rows' windows by index; the finished rows' canvases past their prompts are read back in one transfer.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

TOKENS, STEPS, EDITS = 0, 1, 2  # the pool's planes


class Packed:
    """Named lists of host ints that reach the device together: one tensor, each list a slice of it (a view, made
    when first asked for)."""

    def __init__(self) -> None:
        self._lists: dict[str, list[int]] = {}

    def put(self, name: str, values: Iterable[int]) -> None:
        self._lists[name] = list(values)

    def send(self, device: torch.device) -> "Sent":
        spans, at = {}, 0
        for name, values in self._lists.items():
            spans[name] = (at, at + len(values))
            at += len(values)
        return Sent(torch.tensor([v for values in self._lists.values() for v in values], dtype=torch.long,
                                 device=device), spans)


class Sent:
    """The device's copy of a round's ``Packed`` ints: ``sent[name]`` is that list's slice."""

    def __init__(self, flat: torch.Tensor, spans: dict[str, tuple[int, int]]) -> None:
        self._flat, self._spans, self._views = flat, spans, {}

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._views:
            start, stop = self._spans[name]
            self._views[name] = self._flat[start:stop]
        return self._views[name]

    def size(self, name: str) -> int:
        """The list's length, known on the host."""
        start, stop = self._spans[name]
        return stop - start


class Pool:
    """[3, slots, capacity] long: per slot its canvas (the prompt from column 0, masks after it), each column's
    commit step (the row's forward that last changed it) and how often token editing re-took it."""

    def __init__(self, slots: int, capacity: int, mask_id: int, device: torch.device) -> None:
        self.state = torch.zeros((3, slots, capacity), dtype=torch.long, device=device)
        self.state[TOKENS] = mask_id
        self.columns = torch.arange(capacity, device=device)
        self.blank = torch.tensor([mask_id, 0, 0], device=device)[:, None, None]

    @property
    def tokens(self) -> torch.Tensor:
        return self.state[TOKENS]

    def admit(self, slots: torch.Tensor, prompts: Sequence[torch.Tensor], rows: torch.Tensor,
              columns: torch.Tensor) -> None:
        """Reset ``slots`` (masks, no steps, no re-takes) and write the prompts, flattened, at (``rows``,
        ``columns``): the joiners' slots, each repeated over its prompt's columns 0 ..."""
        self.state[:, slots] = self.blank
        self.state[TOKENS].index_put_((rows, columns), torch.cat(list(prompts)).to(torch.long))

    def window(self, slots: torch.Tensor, low: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The index (rows, columns) of each slot's ``width`` columns from ``low``, [K, width] each."""
        return slots[:, None], low[:, None] + self.columns[:width]

    def finished(self, slots: Sequence[int], prompt_lengths: Sequence[int],
                 gen_length: int) -> list[list[list[int]]]:
        """Each slot's tokens, commit steps and re-takes for the ``gen_length`` columns after its prompt, read in one
        transfer: [3][rows][gen_length]."""
        index = torch.tensor([list(slots), list(prompt_lengths)], dtype=torch.long, device=self.state.device)
        return self.state[:, index[0][:, None], index[1][:, None] + self.columns[:gen_length]].tolist()
