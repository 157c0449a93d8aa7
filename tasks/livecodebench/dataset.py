"""LiveCodeBench data: which release files a version reads, the contest-date window, loading, and the tests.

The hub dataset ``livecodebench/code_generation_lite`` is a folder of JSON-lines files, one per release step
(``test.jsonl``, ``test2.jsonl``, ..., ``test6.jsonl``); its loading script (``version_tag``) concatenates them:
``release_vN`` reads the first N files, ``release_latest`` all six, ``vN`` the N-th alone and ``vA_vB`` files A to B.
lcb_runner (``benchmarks/code_generation.py``) then keeps the problems whose ``contest_date`` lies in
``[start_date, end_date]``, both ends included, the dates read as midnight. ``datasets`` no longer runs loading
scripts, so the harness reads the files itself:

* ``--data-dir DIR``: ``DIR/livecodebench/<file>`` for every file of the version, as downloaded from the hub;
* ``hub``: the files through ``huggingface_hub`` (its cache, its offline mode);
* ``fixtures``: the bundled ``tasks/fixtures/livecodebench_<file>`` of the version's files (a few invented problems
  in the exact schema);
* ``auto``: the hub, else the fixtures.

Private tests ship as base64(zlib(pickle(JSON text))). A pickle can name any callable, so the decoder admits a
stream of string opcodes only and an unpickler that resolves no global: a tampered file raises ``DataError`` and
runs nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import pickle
import pickletools
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tasks.records import FIXTURES, DataError, LoadedData, file_sha256, hub_offline_reason, read_checked_jsonl

HUB_ID = "livecodebench/code_generation_lite"
LOCAL_FOLDER = "livecodebench"
RELEASE_STEPS = 6  # test.jsonl .. test6.jsonl
FIELDS = ("question_title", "question_content", "platform", "question_id", "contest_id", "contest_date",
          "starter_code", "difficulty", "public_test_cases", "private_test_cases", "metadata")
PLATFORMS = ("leetcode", "codeforces", "atcoder")
DIFFICULTIES = ("easy", "medium", "hard")
TEST_TYPES = ("stdin", "functional")
MAX_PRIVATE_BYTES = 1 << 30  # decompressed private tests of one problem; larger is damage, not data

# Opcodes a pickled str is made of (protocols 0-5): nothing that builds an object, names a global or calls.
STRING_OPCODES = frozenset({"PROTO", "FRAME", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE",
                            "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT", "STOP"})


def step_file(step: int) -> str:
    """The hub file of release step ``step`` (1-based)."""
    return "test.jsonl" if step == 1 else f"test{step}.jsonl"


def release_files(version: str) -> tuple[str, ...]:
    """The files a ``version_tag`` reads, as the dataset's loading script lists them."""
    if version == "release_latest":
        version = f"release_v{RELEASE_STEPS}"
    steps: range | None = None
    if version.startswith("release_v") and version[9:].isdigit():
        steps = range(1, int(version[9:]) + 1)
    elif version.startswith("v"):
        first, _, last = version[1:].partition("_v")
        if first.isdigit() and (not last or last.isdigit()):
            steps = range(int(first), int(last or first) + 1)
    if not steps or not 1 <= steps[0] <= steps[-1] <= RELEASE_STEPS:
        raise DataError(f"unknown LiveCodeBench version {version!r} (release_v1..release_v{RELEASE_STEPS}, "
                        f"release_latest, vN or vA_vB)")
    return tuple(step_file(step) for step in steps)


@dataclass(frozen=True)
class Selection:
    """A release version and an optional contest-date window (``YYYY-MM-DD``, both ends included, as lcb_runner's
    ``--start_date``/``--end_date``)."""

    version: str
    start: str | None = None
    end: str | None = None

    def __post_init__(self) -> None:
        release_files(self.version)
        for bound in (self.start, self.end):
            if bound is not None:
                datetime.strptime(bound, "%Y-%m-%d")

    def admits(self, contest_date: str) -> bool:
        """Whether a problem of this contest date is in the window (lcb_runner's comparison)."""
        when = datetime.fromisoformat(contest_date)
        if self.start is not None and when < datetime.strptime(self.start, "%Y-%m-%d"):
            return False
        return self.end is None or when <= datetime.strptime(self.end, "%Y-%m-%d")

    def describe(self) -> str:
        window = f" [{self.start or '...'} .. {self.end or '...'}]" if self.start or self.end else ""
        return f"{self.version}{window}"


@dataclass(frozen=True)
class Case:
    """One test as the release stores it: stdin text and expected stdout, or JSON lines of arguments and the JSON
    of the expected return value (``testtype`` "functional")."""

    input: str
    output: str
    testtype: str


@dataclass(frozen=True)
class Problem:
    """What the judge needs of a record: public then private tests (lcb_runner's order) and the method name of a
    functional (LeetCode) problem; None for a stdin problem."""

    question_id: str
    fn_name: str | None
    tests: tuple[Case, ...]


def _json_list(text: Any, name: str) -> str | None:
    if not isinstance(text, str):
        return f"field {name!r}: expected JSON text"
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return f"field {name!r}: not JSON"
    return None if isinstance(value, list) else f"field {name!r}: expected a JSON list"


def check_record(record: dict[str, Any]) -> str | None:
    """Field checks at load time, so bad data fails naming its line. Private tests are decoded at scoring time."""
    for name in ("question_title", "question_content", "question_id", "contest_id", "starter_code",
                 "private_test_cases", "metadata", "contest_date"):
        if not isinstance(record[name], str):
            return f"field {name!r}: expected a string"
    if record["platform"] not in PLATFORMS:
        return f"field 'platform': {record['platform']!r} is not one of {', '.join(PLATFORMS)}"
    if record["difficulty"] not in DIFFICULTIES:
        return f"field 'difficulty': {record['difficulty']!r} is not one of {', '.join(DIFFICULTIES)}"
    try:
        datetime.fromisoformat(record["contest_date"])
    except ValueError:
        return f"field 'contest_date': {record['contest_date']!r} is not an ISO date"
    problem = _json_list(record["public_test_cases"], "public_test_cases")
    if problem:
        return problem
    try:
        metadata = json.loads(record["metadata"])
    except json.JSONDecodeError:
        return "field 'metadata': not JSON"
    return None if isinstance(metadata, dict) else "field 'metadata': expected a JSON object"


class _NoGlobals(pickle.Unpickler):
    """An unpickler that resolves nothing: no class, no function, no persistent id."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent id refused")


def unpickle_string(data: bytes) -> str:
    """The str a pickle holds; anything else (an object, a call, a container) raises DataError before it is built."""
    try:
        for opcode, _, position in pickletools.genops(data):
            if opcode.name not in STRING_OPCODES:
                raise DataError(f"private tests: pickle opcode {opcode.name} at byte {position} refused "
                                f"(only a pickled string is accepted)")
        value = _NoGlobals(io.BytesIO(data)).load()
    except (ValueError, pickle.UnpicklingError, EOFError) as error:
        raise DataError(f"private tests: not a pickled string ({error})") from None
    if type(value) is not str:
        raise DataError(f"private tests: the pickle holds a {type(value).__name__}, not a string")
    return value


def decode_private(text: str) -> list[Any]:
    """The private tests as lcb_runner reads them: JSON text as is, else base64(zlib(pickle(JSON text)))."""
    try:
        tests = json.loads(text)
    except json.JSONDecodeError:
        try:
            packed = base64.b64decode(text.encode("ascii"))
            inflater = zlib.decompressobj()
            raw = inflater.decompress(packed, MAX_PRIVATE_BYTES)
        except (binascii.Error, UnicodeEncodeError, zlib.error) as error:
            raise DataError(f"private tests: not base64 zlib data ({error})") from None
        if inflater.unconsumed_tail:
            raise DataError(f"private tests: over {MAX_PRIVATE_BYTES >> 20} MiB decompressed")
        try:
            tests = json.loads(unpickle_string(raw))
        except json.JSONDecodeError:
            raise DataError("private tests: the pickled string is not JSON") from None
    if not isinstance(tests, list):
        raise DataError("private tests: expected a JSON list")
    return tests


def encode_private(tests: list[dict[str, str]]) -> str:
    """The release's encoding of private tests (used to build fixtures and in tests)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def _test_cases(items: list[Any], where: str) -> list[Case]:
    cases = []
    for item in items:
        if (not isinstance(item, dict) or not isinstance(item.get("input"), str)
                or not isinstance(item.get("output"), str) or item.get("testtype") not in TEST_TYPES):
            raise DataError(f"{where}: a test is not {{input, output, testtype}} strings")
        cases.append(Case(item["input"], item["output"], item["testtype"]))
    return cases


def problem(record: dict[str, Any]) -> Problem:
    """The judge's view of a record; raises DataError (naming the problem) for undecodable tests."""
    where = f"LiveCodeBench {record['question_id']}"
    try:
        private = decode_private(record["private_test_cases"])
    except DataError as error:
        raise DataError(f"{where}: {error}") from None
    tests = _test_cases(json.loads(record["public_test_cases"]), where) + _test_cases(private, where)
    fn_name = json.loads(record["metadata"]).get("func_name")
    return Problem(record["question_id"], fn_name if isinstance(fn_name, str) and fn_name else None, tuple(tests))


def _hub_file(name: str) -> Path:
    from huggingface_hub import hf_hub_download

    offline = hub_offline_reason()
    try:
        return Path(hf_hub_download(HUB_ID, name, repo_type="dataset", local_files_only=offline is not None))
    except Exception as error:  # network, auth and missing-file errors come in many types
        first = f"offline ({offline}) and not in the local cache" if offline else str(error).strip()[:200]
        raise DataError(f"cannot load {HUB_ID}/{name} from the hub: {first}; pass --data fixtures for the bundled "
                        f"items or --data-dir DIR with {LOCAL_FOLDER}/{name}") from None


def _files(selection: Selection, source: str, data_dir: Path | None) -> tuple[list[Path], str]:
    names = release_files(selection.version)
    if data_dir is not None:
        paths = [data_dir / LOCAL_FOLDER / name for name in names]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise DataError(f"{missing[0]} not found (--data-dir must hold {LOCAL_FOLDER}/{', '.join(names)} from "
                            f"{HUB_ID})")
        return paths, "local"
    if source == "fixtures":
        paths = [FIXTURES / f"livecodebench_{name}" for name in names]
        return [p for p in paths if p.exists()], "fixtures"
    if source == "hub":
        return [_hub_file(name) for name in names], "hub"
    try:
        return _files(selection, "hub", None)
    except DataError:
        return _files(selection, "fixtures", None)


def load(selection: Selection, source: str, data_dir: Path | None) -> LoadedData:
    """The records of the selection's release files inside its window, in file order."""
    paths, origin = _files(selection, source, data_dir)
    if not paths:
        raise DataError(f"no bundled LiveCodeBench fixture among {', '.join(release_files(selection.version))}")
    records, digest = [], hashlib.sha256(selection.describe().encode())
    for path in paths:
        records += [r for r in read_checked_jsonl(path, FIELDS, check_record) if selection.admits(r["contest_date"])]
        digest.update(f"\n{path.name}:{file_sha256(path)}".encode())
    if not records:
        raise DataError(f"no LiveCodeBench problem of {selection.describe()} in {', '.join(map(str, paths))}")
    names = ", ".join(f"fixtures/{p.name}" if origin == "fixtures" else str(p) for p in paths)
    location = f"{HUB_ID}/{selection.describe()}" if origin == "hub" else names
    return LoadedData(records, origin, location, digest.hexdigest())
