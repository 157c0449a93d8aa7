"""Loading a task's records: from the hub through ``datasets``, from a local file, or from the bundled fixtures.

Every source yields the hub's own schema, so the task code downstream is the same. A malformed local file fails with
one line naming the file, the line and the field.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from harness.errors import UserError
from harness.files import JSONLError
from harness.files import file_sha256, read_jsonl  # file_sha256 is re-exported for tasks.evalplus.releases

FIXTURES = Path(__file__).resolve().parent / "fixtures"


class DataError(UserError, ValueError):
    """Data that cannot be loaded; the message is one line for the user."""


RecordCheck = Callable[[dict[str, Any]], "str | None"]
"""A task's own check of one record: None if it is usable, else a short reason that names the field."""


@dataclass(frozen=True)
class DatasetSpec:
    hub_id: str
    config: str | None
    split: str
    local_file: str  # path under --data-dir, e.g. "gsm8k/test.jsonl" (.jsonl or .jsonl.gz)
    fixture: str  # file name under tasks/fixtures/
    required_fields: tuple[str, ...]
    gated: bool = False
    hub_configs: tuple[str, ...] = ()  # several hub configs read in this order and concatenated (MATH's subjects)
    check: RecordCheck | None = None  # field checks beyond presence, so bad data fails at load time with its line


@dataclass(frozen=True)
class LoadedData:
    records: list[dict[str, Any]]
    source: str  # "hub" | "local" | "fixtures"
    location: str  # hub id/config/split, or the file path
    sha256: str  # of the file, or of the records as loaded from the hub


def read_checked_jsonl(path: Path, required_fields: tuple[str, ...],
               check: RecordCheck | None = None) -> list[dict[str, Any]]:
    """The records of a local ``.jsonl``/``.jsonl.gz`` file, each checked, so bad data fails naming its line."""
    records = []
    try:
        for number, record in read_jsonl(path):
            if not isinstance(record, dict):
                raise DataError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            missing = [f for f in required_fields if f not in record]
            if missing:
                raise DataError(f"{path}:{number}: missing field {', '.join(repr(m) for m in missing)}")
            problem = check(record) if check else None
            if problem:
                raise DataError(f"{path}:{number}: {problem}")
            records.append(record)
    except JSONLError as error:
        raise DataError(str(error)) from None
    if not records:
        raise DataError(f"{path}: no records")
    return records


def records_sha256(records: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256()
    for record in records:
        digest.update(json.dumps(record, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def load_local(spec: DatasetSpec, data_dir: Path) -> LoadedData:
    path = data_dir / spec.local_file
    if not path.exists():
        raise DataError(f"{path} not found (--data-dir must hold {spec.local_file} in the {spec.hub_id} schema)")
    records = read_checked_jsonl(path, spec.required_fields, spec.check)
    return LoadedData(records, "local", str(path), file_sha256(path))


def load_fixtures(spec: DatasetSpec) -> LoadedData:
    path = FIXTURES / spec.fixture
    records = read_checked_jsonl(path, spec.required_fields, spec.check)
    return LoadedData(records, "fixtures", f"fixtures/{spec.fixture}", file_sha256(path))


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
HUB_PROBE_TIMEOUT_S = 3.0


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_offline_reason() -> str | None:
    """Why the hub cannot be reached (None when it can): an offline variable, else one TCP connection to the hub's
    host, tried once per process. Without it every task's load waits through the hub client's retries (tens of
    seconds and a dozen log lines each) before falling back."""
    for variable in OFFLINE_VARIABLES:
        if _truthy(os.environ.get(variable)):
            return f"{variable} is set"
    from huggingface_hub import constants

    return unreachable(constants.ENDPOINT)


@functools.lru_cache(maxsize=4)
def unreachable(endpoint: str) -> str | None:
    """Why a TCP connection to ``endpoint``'s host and port fails (None when it succeeds)."""
    url = urlsplit(endpoint)
    host, port = url.hostname or endpoint, url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as error:
        return f"{host}:{port} unreachable: {error.strerror or error}"
    return None


def go_offline() -> None:
    """Make this process's hub clients use their caches only, so a cached dataset still loads and nothing retries
    (the variables stay as the user set them, so the reason given is the one found)."""
    import datasets
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True


def load_hub(spec: DatasetSpec) -> LoadedData:
    import datasets

    offline = hub_offline_reason()
    if offline:
        go_offline()
    configs = spec.hub_configs or (spec.config,)
    records: list[dict[str, Any]] = []
    for config in configs:
        try:
            dataset = datasets.load_dataset(spec.hub_id, config, split=spec.split)
        except Exception as error:  # datasets raises many types for network, auth and schema problems
            first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            if offline:
                first = f"offline ({offline}) and not in the local cache"
            hint = (" (gated dataset: accept its terms on the hub and log in with `hf auth login` or set HF_TOKEN)"
                    if spec.gated else "")
            raise DataError(f"cannot load {spec.hub_id} from the hub: {first}{hint}; pass --data fixtures for the "
                            f"bundled items or --data-dir with {spec.local_file}") from None
        records.extend(dict(row) for row in dataset)
    missing = [f for f in spec.required_fields if records and f not in records[0]]
    if missing:
        raise DataError(f"{spec.hub_id}: missing field {', '.join(missing)} (schema changed upstream?)")
    for number, record in enumerate(records, start=1):
        problem = spec.check(record) if spec.check else None
        if problem:
            raise DataError(f"{spec.hub_id} row {number}: {problem}")
    where = f"{spec.hub_id}/{'+'.join(c or 'default' for c in configs)}/{spec.split}"
    return LoadedData(records, "hub", where, records_sha256(records))


def load_records(spec: DatasetSpec, source: str, data_dir: Path | None) -> LoadedData:
    """``source``: "hub", "fixtures", or "auto" (the local folder if given, else the hub, else the fixtures)."""
    if data_dir is not None:
        return load_local(spec, data_dir)
    if source == "fixtures":
        return load_fixtures(spec)
    if source == "hub":
        return load_hub(spec)
    try:
        return load_hub(spec)
    except DataError:
        return load_fixtures(spec)

