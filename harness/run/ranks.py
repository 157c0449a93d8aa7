"""Which share of a run this process does: rank and world size as torchrun or accelerate set them.

A leaf (no torch.distributed), so the runner can split its work by rank without knowing how ranks meet.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def context_from_env() -> DistContext:
    """RANK, WORLD_SIZE and LOCAL_RANK (set by both ``torchrun`` and ``accelerate launch``); one process without them."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return DistContext(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
