"""The resume store: every finished generation is appended durably under a key derived from what determines it.

One folder per (model, task) holds append-only JSONL shards (one per writer, so data-parallel ranks never share a
file). A record is flushed and fsynced before the next batch starts, so a killed run loses only the batch in flight;
a torn last line (the process died mid-write) is ignored on load. Loading merges all shards and drops duplicates, so
a rerun with another number of writers resumes just as well.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

from harness.errors import RunError
from harness.files import JSONLError, jsonl_text, read_jsonl, write_atomic
from harness.run.records import RecordError, SampleRecord


def sample_key(**parts: Any) -> str:
    """A stable hash of everything that determines a generation (model, decoding config, prompt, seed, ...)."""
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def versioned_key(base: str, version: int) -> str:
    """The key of a sample decoded by version ``version`` of its decoder, from its ``sample_key`` (``base``).

    Version 1 keeps the base key: stores written before decoders had versions hold version-1 samples under exactly
    these keys, so they stay valid. A later version hashes the base key with its number, which is cheap, so a rerun
    can look up what each other version stored (harness.run.versions)."""
    return base if version == 1 else hashlib.sha256(f"{base}:decoder-v{version}".encode()).hexdigest()[:32]


def safe_name(name: str) -> str:
    """A file-system-safe version of a model or task name (hub ids contain slashes)."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)


class SampleStore:
    def __init__(self, folder: Path, shard: str = "0"):
        self.folder = folder
        self.shard_path = folder / f"shard-{safe_name(shard)}.jsonl"

    def load(self) -> dict[str, SampleRecord]:
        """All stored records by key, merged over shards; the first copy of a duplicated key wins."""
        records: dict[str, SampleRecord] = {}
        if not self.folder.exists():
            return records
        for path in sorted(self.folder.glob("shard-*.jsonl")):
            try:
                # tolerant: a torn last line, a line that is not JSON or not a whole record is skipped, so those
                # samples are regenerated
                for _, line in read_jsonl(path, tolerant=True):
                    record = _record(line)
                    if record is not None and record.key is not None:
                        records.setdefault(record.key, record)
            except JSONLError as error:  # in tolerant mode only bytes that are not UTF-8: damage, not a torn write
                raise RunError(f"store shard {error.path} line {error.line} is {error.reason} (damaged on disk?); "
                               f"delete that line, or the whole file to regenerate its samples, and rerun") from None
        return records

    def write_peak_memory(self, peak_bytes: int) -> None:
        """Each writer leaves its peak memory beside its shard; the run reports the largest. Written atomically, so
        a writer killed mid-write never leaves a file the next run's ``peak_memory`` cannot parse."""
        write_atomic(self.shard_path.with_suffix(".peak"), str(peak_bytes))

    def peak_memory(self) -> int | None:
        peaks = [int(p.read_text()) for p in self.folder.glob("shard-*.peak")] if self.folder.exists() else []
        return max(peaks, default=None)

    def write_settled_rows(self, rows: int) -> None:
        """A writer whose decodes ran out of memory leaves the rows it settled at beside its shard (the smallest of
        its runs: a resumed run starts at the size asked again); the manifest reports the smallest of all writers."""
        path = self.shard_path.with_suffix(".rows")
        earlier = int(path.read_text()) if path.exists() else rows
        write_atomic(path, str(min(rows, earlier)))

    def settled_rows(self) -> int | None:
        """The fewest rows any writer of this store fell back to after running out of memory; None if none did."""
        rows = [int(p.read_text()) for p in self.folder.glob("shard-*.rows")] if self.folder.exists() else []
        return min(rows, default=None)

    def append(self, records: Iterable[SampleRecord]) -> None:
        lines = jsonl_text([r.to_json() for r in records])
        if not lines:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        _repair_torn_tail(self.shard_path)
        with self.shard_path.open("a", encoding="utf-8") as handle:
            handle.write(lines)
            handle.flush()
            os.fsync(handle.fileno())


def _record(line: Any) -> SampleRecord | None:
    """A stored line as a record, or None when it is not one."""
    try:
        return SampleRecord.from_json(line)
    except RecordError:
        return None


def _repair_torn_tail(path: Path) -> None:
    """Drop a partial last line left by a killed writer, so the next append starts on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        handle.truncate(handle.read().rfind(b"\n") + 1)
