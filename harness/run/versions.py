"""Samples a store holds from another version of their decoder: found, counted, said in one line, and either
regenerated (the default) or kept (``--reuse-stale``).

A sample's key carries its decoder's version (``harness.run.store.versioned_key``), so a rerun after a decoder
changed its outputs finds none of the old samples under the new keys; this module finds them under the old ones, so
the run can say what it regenerates instead of doing it silently.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from harness.run.store import versioned_key

NEWER_VERSIONS_LOOKED_AT = 8  # a store written by a later checkout of the code (found too, and regenerated)


class Keyed(Protocol):
    key: str
    base_key: str


@dataclass(frozen=True)
class StaleSamples:
    """Planned samples this decoder version lacks that another version stored: planned key -> (version, key)."""

    found: Mapping[str, tuple[int, str]]

    def counts(self) -> dict[int, int]:
        """Stored samples per other version, newest first."""
        return dict(sorted(Counter(version for version, _ in self.found.values()).items(), reverse=True))

    def manifest(self) -> dict[str, int]:
        """What a manifest records of the samples it kept: ``{"v3": 412}``."""
        return {f"v{version}": n for version, n in self.counts().items()}


def other_versions(version: int) -> list[int]:
    """The versions looked up besides ``version``: the older ones, newest first, then a few newer ones."""
    return [*range(version - 1, 0, -1), *range(version + 1, version + 1 + NEWER_VERSIONS_LOOKED_AT)]


def find_stale(planned: Sequence[Keyed], stored: Mapping[str, Any], version: int) -> StaleSamples:
    """Every planned sample absent under its key whose base key, at another version, is stored."""
    if not stored:
        return StaleSamples({})
    others = other_versions(version)
    found: dict[str, tuple[int, str]] = {}
    for p in planned:
        if p.key in stored:
            continue
        for other in others:
            key = versioned_key(p.base_key, other)
            if key in stored:
                found[p.key] = (other, key)
                break
    return StaleSamples(found)


def stale_message(stale: StaleSamples, decoder: str, version: int, action: str) -> str:
    """One line: "412 stored samples of refusion decoder v3; this is v4: <action>" (regenerating, kept, ...)."""
    parts = [f"{n} stored samples of {decoder} decoder v{v}" if i == 0 else f"{n} of v{v}"
             for i, (v, n) in enumerate(stale.counts().items())]
    return f"{' and '.join(parts)}; this is v{version}: {action}"
