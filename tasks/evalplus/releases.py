"""HumanEval+ and MBPP+ data: evalplus's release files, and what the tasks need from one of their records.

Where records come from, as the other tasks (``tasks.records.load_records``) but with evalplus's release in place of
a hub dataset:

* ``--data-dir DIR``: ``DIR/humaneval_plus/HumanEvalPlus.jsonl.gz`` or ``DIR/mbpp_plus/MbppPlus.jsonl.gz`` (or the
  same names without ``.gz``), the release assets as downloaded;
* ``hub``: the release through evalplus's own loader code, so its download, its cache (``~/.cache/evalplus``) and
  its ``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH`` variables work as they do for evalplus. The harness reads
  the file that ``get_human_eval_plus`` / ``get_mbpp_plus`` read (their ``_ready_*_path`` step), not their result:
  ``get_mbpp_plus`` converts MBPP+ inputs in place (lists to tuples, sets, complex numbers), which must happen once,
  at scoring time (``problem``), while the records stay in the file's JSON form for hashing and caching;
* ``fixtures``: a few problems written for the tests, in the release format;
* ``auto``: the release, else the fixtures (unless an override variable names a file: then its errors show).

evalplus reads its override variables when ``evalplus.data`` is first imported; the harness imports it only inside
``load_release``, so a variable set before the run is honoured and the harness itself never sets one.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.records import (DataError, DatasetSpec, LoadedData, file_sha256, load_fixtures,
                           read_checked_jsonl)

FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "contract", "base_input", "plus_input", "atol")


def _check_common(record: dict[str, Any]) -> str | None:
    for name in ("task_id", "prompt", "canonical_solution"):
        if not isinstance(record[name], str) or not record[name].strip():
            return f"field {name!r}: expected a non-empty string"
    if not isinstance(record["contract"], str):
        return "field 'contract': expected a string"
    if not isinstance(record["entry_point"], str) or not record["entry_point"].isidentifier():
        return f"field 'entry_point': {record['entry_point']!r} is not a Python name"
    for name in ("base_input", "plus_input"):
        inputs = record[name]
        if not isinstance(inputs, list) or not all(isinstance(arguments, list) for arguments in inputs):
            return f"field {name!r}: expected a list of argument lists"
    if not record["base_input"]:
        return "field 'base_input': no inputs"
    atol = record["atol"]
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not atol >= 0:
        return f"field 'atol': expected a number >= 0, got {atol!r}"
    return None


def _check_mbpp(record: dict[str, Any]) -> str | None:
    problem = _check_common(record)
    if problem:
        return problem
    if not re.fullmatch(r".+/\d+", record["task_id"]):
        return f"field 'task_id': {record['task_id']!r} does not end in /<number> (evalplus keys MBPP+ inputs by it)"
    if not isinstance(record["assertion"], str) or not mbpp_tests(record):
        return "field 'assertion': expected the problem's assert statements"
    if not mbpp_text(record):
        return "field 'prompt': expected a docstring with the problem statement"
    return None


@dataclass(frozen=True)
class Release:
    """One evalplus dataset. ``dataset`` is evalplus's name for it, which also picks its special oracles."""

    dataset: str
    title: str
    asset: str
    version: str
    override_env: str
    spec: DatasetSpec

    @property
    def url(self) -> str:
        return (f"https://github.com/evalplus/{self.asset.lower()}_release/releases/download/{self.version}/"
                f"{self.asset}.jsonl.gz")


HUMANEVAL_PLUS = Release(
    dataset="humaneval", title="HumanEval+", asset="HumanEvalPlus", version="v0.1.10",
    override_env="HUMANEVAL_OVERRIDE_PATH",
    spec=DatasetSpec(hub_id="evalplus/humanevalplus_release", config="v0.1.10", split="test",
                     local_file="humaneval_plus/HumanEvalPlus.jsonl.gz", fixture="humaneval_plus.jsonl",
                     required_fields=FIELDS, check=_check_common),
)
MBPP_PLUS = Release(
    dataset="mbpp", title="MBPP+", asset="MbppPlus", version="v0.2.0", override_env="MBPP_OVERRIDE_PATH",
    spec=DatasetSpec(hub_id="evalplus/mbppplus_release", config="v0.2.0", split="test",
                     local_file="mbpp_plus/MbppPlus.jsonl.gz", fixture="mbpp_plus.jsonl",
                     required_fields=(*FIELDS, "assertion"), check=_check_mbpp),
)


def how_to_provide(release: Release) -> str:
    plain = release.spec.local_file.removesuffix(".gz")
    return (f"download {release.url} and pass --data-dir DIR with DIR/{release.spec.local_file} (or {plain}), "
            f"or set {release.override_env} to the file")


def _release_path(release: Release) -> tuple[str, bool]:
    """The file evalplus's loader reads (downloading it into evalplus's cache if needed), and whether an override
    variable named it."""
    if release.dataset == "humaneval":
        from evalplus.data import humaneval

        return humaneval._ready_human_eval_plus_path(), bool(humaneval.HUMANEVAL_OVERRIDE_PATH)
    from evalplus.data import mbpp

    return mbpp._ready_mbpp_plus_path(), bool(mbpp.MBPP_OVERRIDE_PATH)


def load_release(release: Release) -> LoadedData:
    """The release file as evalplus's own loader finds it: the override variable's file, its cache, or a download."""
    try:
        where, overridden = _release_path(release)
        path = Path(where)
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found")
    except Exception as error:  # wget and urllib raise many types; the user needs one line
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise DataError(f"cannot get {release.title} {release.version} ({type(error).__name__}: {first}); "
                        f"{how_to_provide(release)}") from None
    records = read_checked_jsonl(path, release.spec.required_fields, release.spec.check)
    source, location = ("local", str(path)) if overridden else ("hub", release.url)
    return LoadedData(records, source, location, file_sha256(path))


def load_local_copy(release: Release, data_dir: Path) -> LoadedData:
    names = (release.spec.local_file, release.spec.local_file.removesuffix(".gz"))
    for name in names:
        path = data_dir / name
        if path.is_file():
            records = read_checked_jsonl(path, release.spec.required_fields, release.spec.check)
            return LoadedData(records, "local", str(path), file_sha256(path))
    raise DataError(f"{data_dir / names[0]} not found; {how_to_provide(release)}")


def load(release: Release, source: str, data_dir: Path | None) -> LoadedData:
    """``source`` as for every task: "hub", "fixtures" or "auto"; ``data_dir`` wins when given."""
    if data_dir is not None:
        return load_local_copy(release, data_dir)
    if source == "fixtures":
        return load_fixtures(release.spec)
    if source == "hub" or os.environ.get(release.override_env):
        return load_release(release)
    try:
        return load_release(release)
    except DataError:
        return load_fixtures(release.spec)


def mbpp_text(record: dict[str, Any]) -> str:
    """The MBPP+ problem statement: the prompt's docstring up to its first assert line."""
    try:
        docstring = ast.literal_eval(record["prompt"].strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ""
    if not isinstance(docstring, str):
        return ""
    lines = docstring.strip().split("\n")
    statement = []
    for line in lines:
        if line.lstrip().startswith("assert"):
            break
        statement.append(line)
    return "\n".join(statement).strip()


def mbpp_tests(record: dict[str, Any]) -> list[str]:
    """The MBPP+ base tests as assert statements (the ``assertion`` field, without its imports)."""
    source = record["assertion"]
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    return [ast.get_source_segment(source, node) or "" for node in tree.body if isinstance(node, ast.Assert)]


@dataclass(frozen=True)
class Problem:
    """A record as scoring needs it. ``solution`` is evalplus's canonical program (prompt + canonical solution);
    the inputs are Python values, converted as evalplus's loader converts them; ``key`` hashes what decides the
    expected outputs, so it names them in the ground-truth cache."""

    task_id: str
    dataset: str
    entry_point: str
    solution: str
    base_inputs: list[Any]
    plus_inputs: list[Any]
    atol: float
    key: str


def problem(release: Release, record: dict[str, Any]) -> Problem:
    base, plus = record["base_input"], record["plus_input"]
    solution = record["prompt"] + record["canonical_solution"]
    content = [release.dataset, record["task_id"], record["entry_point"], solution, base, plus]
    key = hashlib.sha256(json.dumps(content, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()
    if release.dataset == "mbpp":
        from evalplus.data.mbpp import mbpp_deserialize_inputs

        base = mbpp_deserialize_inputs(record["task_id"], base)
        plus = mbpp_deserialize_inputs(record["task_id"], plus)
    return Problem(record["task_id"], release.dataset, record["entry_point"], solution, base, plus,
                   float(record["atol"]), key)
