"""Data-parallel runs under ``torchrun`` or ``accelerate launch``: both set RANK, WORLD_SIZE and LOCAL_RANK.

Each rank generates its share of every model × task into its own store shard; rank 0 waits for the others, then
scores and aggregates everything. The store is keyed by content, so a rerun may use another number of ranks.
"""

from __future__ import annotations

import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from harness.errors import RunError
from harness.distributed.launcher_watch import watch_launcher
from harness.run.ranks import DistContext

WAIT_FOR_RANKS = timedelta(hours=24)  # ranks finish at different times; torchrun itself reports a dead rank


def start(ctx: DistContext, device: torch.device) -> None:
    """Join the process group (NCCL on CUDA, gloo otherwise) and make a killed run say what happened."""
    if not ctx.active or dist.is_initialized():
        return
    signal.signal(signal.SIGTERM, _stopped_by_launcher(ctx))
    watch_launcher(ctx.rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    try:
        dist.init_process_group(backend=backend, timeout=WAIT_FOR_RANKS)
    except RuntimeError as error:  # DistNetworkError and friends: the rendezvous failed
        raise RunError(f"rank {ctx.rank}: cannot join the other ranks ({_first_line(error)}); check the launcher's "
                       f"--nproc-per-node / --master-port and rerun") from None


def wait_for_all(ctx: DistContext) -> None:
    """Rank 0 waits for every rank to finish generating; a rank that never arrives is named in the error."""
    if not ctx.active:
        return
    try:  # new_group talks to the other ranks too: a lost peer raises DistNetworkError (a RuntimeError) here
        group = dist.new_group(backend="gloo", timeout=WAIT_FOR_RANKS)
        dist.monitored_barrier(group=group, timeout=WAIT_FOR_RANKS, wait_all_ranks=True)
    except RuntimeError as error:
        raise RunError(f"rank {ctx.rank}: not every rank finished ({_first_line(error)}); finished samples "
                       f"are kept in the store, rerun the same command to resume") from None


def stop(ctx: DistContext) -> None:
    if ctx.active and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except RuntimeError:  # the peers are gone already; nothing is left to release
            pass


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _stopped_by_launcher(ctx: DistContext):
    def handler(signum, frame):
        print(f"rank {ctx.rank}: stopped by the launcher (another rank failed?); finished samples are kept in the "
              f"store, rerun the same command to resume", file=sys.stderr)
        sys.exit(1)

    return handler
