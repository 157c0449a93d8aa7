"""``--write-docs``: docs/benchmarks.md quotes what the suite printed, between markers, so its figures come from a
run rather than from hand copies that go stale. A block is

    <!-- benchmark:NAME begin -->
    ... (replaced: a provenance line, then the benchmark's output) ...
    <!-- benchmark:NAME end -->

and ``NAME`` is a benchmark of the registry, or ``summary`` (every verdict of the whole quick set, from one run or
from the JSON of runs in parts: ``--from-json``). Text outside the markers is never touched."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

DOCS = "docs/benchmarks.md"
SUMMARY = "summary"
MARKER = re.compile(r"^<!-- benchmark:(?P<name>[\w.-]+) (?P<edge>begin|end) -->$", re.MULTILINE)


class MarkerError(ValueError):
    """The document's markers do not pair up."""


@dataclass(frozen=True)
class Block:
    name: str
    start: int  # the first character after the begin marker's line
    end: int  # the first character of the end marker


def blocks(text: str) -> list[Block]:
    """The marked blocks, in order; raises ``MarkerError`` on a marker without its partner or nested blocks."""
    found, open_ = [], None
    for match in MARKER.finditer(text):
        name, edge = match["name"], match["edge"]
        if edge == "begin":
            if open_ is not None:
                raise MarkerError(f"benchmark:{name} begins inside benchmark:{open_[0]}")
            open_ = (name, match.end() + 1)
        else:
            if open_ is None or open_[0] != name:
                raise MarkerError(f"benchmark:{name} ends where it did not begin")
            found.append(Block(name, open_[1], match.start()))
            open_ = None
    if open_ is not None:
        raise MarkerError(f"benchmark:{open_[0]} never ends")
    return found


def replace(text: str, contents: dict[str, str]) -> str:
    """``text`` with the blocks named in ``contents`` replaced (each ends with a newline); every other character
    as it was."""
    out, at = [], 0
    for block in blocks(text):
        if block.name in contents:
            body = contents[block.name]
            out += [text[at:block.start], body if body.endswith("\n") else body + "\n"]
            at = block.end
    return "".join(out) + text[at:]


def provenance(suite: dict[str, Any], record: dict[str, Any]) -> str:
    command = shlex.join(["python", "-m", "benchmarks", record["name"], *record["arguments"]])
    load = f", load average {suite['load_average']:.1f}" if suite.get("load_average") is not None else ""
    return (f"`{command}` on {suite['machine']}{load}, {record['threads']} torch thread(s), {suite['date']} "
            f"({record['seconds']:.0f} s):")


def render(suite: dict[str, Any], record: dict[str, Any]) -> str:
    """A benchmark's block: where and how it ran, then what it printed."""
    return f"{provenance(suite, record)}\n\n```\n{record['output'].strip()}\n```\n"


def render_summary(suite: dict[str, Any], records: Sequence[dict[str, Any]]) -> str:
    runs = list(dict.fromkeys(f"`{s['command']}` on {s['machine']}, {s['date']}"
                              for s in (record.get("suite", suite) for record in records)))
    lines = [f"Every verdict of {'; '.join(runs)}:", "",
             "| benchmark | check | target | measured | verdict |", "|---|---|---|---|---|"]
    for record in records:
        for v in record["verdicts"]:
            measured = "not measured" if v["measured"] is None else f"{v['measured']:.4g}"
            lines.append(f"| `{record['name']}` | {v['name']} | {v['target'] or '-'} | {measured} | {v['status']} |")
    return "\n".join(lines) + "\n"


def write_docs(path: Path, suite: dict[str, Any], records: Sequence[dict[str, Any]], every: Sequence[str]) -> list[str]:
    """Rewrites the blocks of the benchmarks that ran cleanly (the summary only when every one of ``every`` did);
    returns what it did, a line each. A record read back from an earlier run's JSON carries that run's ``suite``,
    which its provenance line then states."""
    text = path.read_text()
    names = {b.name for b in blocks(text)}
    ran = {r["name"]: r for r in records if r["status"] == "ok"}
    contents = {name: render(r.get("suite", suite), r) for name, r in ran.items() if name in names}
    if SUMMARY in names and set(every) <= set(ran):
        contents[SUMMARY] = render_summary(suite, [ran[name] for name in every])
    path.write_text(replace(text, contents))
    left = sorted(names - set(contents))
    return [f"{path}: rewrote {', '.join(sorted(contents)) or 'nothing'}"
            + (f"; left as they were: {', '.join(left)}" if left else "")]
