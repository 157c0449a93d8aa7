"""Files every part of the project reads or writes: atomic writes, JSONL, and the cache root.

A leaf module (standard library only), so models and tasks may use it without importing the run loop.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

CACHE_ENV = "DLLM_HARNESS_CACHE"


def cache_root() -> Path:
    """Where the harness caches what it computes once (tiny models, evalplus ground truth): $DLLM_HARNESS_CACHE,
    else $XDG_CACHE_HOME/dllm-harness, else ~/.cache/dllm-harness; read when called, so tests can redirect it."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dllm-harness"


def file_sha256(path: Path) -> str:
    """A file's sha256, read in chunks (datasets and tokenizer files are too large to read at once)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it; set straight back
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a whole file or nothing (a crash never leaves half a results file), with the permissions a plain
    ``open(path, "w")`` would give: a temporary file is private (0600), which would hide results in a shared folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str, errors: str = "strict") -> None:
    """``write_bytes_atomic`` of UTF-8 text; ``errors`` is the encoder's (``replace`` for a page that must be written
    whatever a model produced)."""
    write_bytes_atomic(path, text.encode("utf-8", errors))


def jsonl_text(records: Sequence[Any]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def write_jsonl_atomic(path: Path, records: Sequence[Any]) -> None:
    write_atomic(path, jsonl_text(records))


def write_json_atomic(path: Path, payload: Any) -> None:
    write_atomic(path, json.dumps(payload, indent=2, default=str))


class JSONLError(ValueError):
    """A line that is not JSON; callers turn it into their own one-line error."""

    def __init__(self, path: Path, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


def read_jsonl(path: Path, tolerant: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-blank line of a ``.jsonl`` or ``.jsonl.gz`` file.

    Lines are split on newline bytes and decoded one by one, so bytes that are not UTF-8 raise JSONLError naming
    their line (a text stream would fail mid-chunk, at no line). ``tolerant`` is for files a killed writer may have
    left behind (the resume store): a last line without its newline ends the file, even inside a character, and a
    line that is not JSON is skipped; otherwise such a line raises JSONLError. Bytes that are not UTF-8 on a
    complete line raise in both modes: that is damage, not a torn write, and skipping it would hide it.
    """
    opened = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    with opened as handle:
        for number, raw in enumerate(handle, start=1):
            if tolerant and not raw.endswith(b"\n"):
                return  # torn write from a killed process
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise JSONLError(path, number, "not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                if tolerant:
                    continue
                raise JSONLError(path, number, f"not valid JSON ({error.msg})") from None
            yield number, value
