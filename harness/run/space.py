"""A full disk (or quota, or a file system gone read-only) while a run writes: one line and exit 3, not a traceback.

Nothing is lost by stopping there: every finished sample is in the store (a torn last line is dropped on resume),
and every other file of a run folder is written whole or not at all (``harness.files.write_atomic``), so rerunning
the same command once there is space resumes. The line says what the user needs to decide: which folder, how much
space is free, how many samples are kept.
"""

from __future__ import annotations

import errno
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from harness.errors import DiskFull, RunError
from harness.run.store import SampleStore

FULL = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
        errno.EROFS: "the file system is read-only"}


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in FULL


def free_bytes(path: Path) -> int | None:
    """Free bytes on the file system holding ``path`` (or its nearest existing parent)."""
    for folder in (Path(path), *Path(path).parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def kept_samples(roots: Iterable[Path]) -> int:
    """Samples stored under ``roots``: every store folder (one with shards) found there, each counted once."""
    folders = {shard.parent for root in roots if Path(root).is_dir() for shard in Path(root).rglob("shard-*.jsonl")}
    total = 0
    for folder in folders:
        try:
            total += len(SampleStore(folder).load())
        except (RunError, OSError):  # a damaged shard: its samples are not counted here, resume reports it
            continue
    return total


def disk_full_message(error: OSError, folder: Path, stores: Iterable[Path]) -> str:
    written = f" {error.filename}" if error.filename else ""
    free = free_bytes(folder)
    space = "an unknown amount" if free is None else f"{free:,} bytes"
    return (f"cannot write{written}: {FULL[error.errno]} ({error.strerror}); {folder} has {space} free and keeps "
            f"{kept_samples(stores)} finished samples in its store; free some space (or raise the quota, or make it "
            f"writable) and rerun the same command to resume")


@contextmanager
def disk_full_ends_run(folder: Path, stores: Iterable[Path]) -> Iterator[None]:
    """Run the body; a write that fails for want of space becomes DiskFull with its one line."""
    try:
        yield
    except OSError as error:
        if not is_disk_full(error):
            raise
        raise DiskFull(disk_full_message(error, Path(folder), list(stores))) from None
