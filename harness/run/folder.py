"""The layout of a run folder, in one place: the runner writes it, the report and the gate read it through this.

    <run>/results.json                     manifest and per-(model, task) results
    <run>/samples/<model>/<task>.jsonl     scored sample records, one per item
    <run>/store/<model>/<task>/shard-*     the resume store (harness.run.store); a run may keep it elsewhere
                                           (a sweep's points of one batch size share one)
    <run>/report.html                      the HTML report (reports.html)
    <run>/report_<table>.csv               its tables as CSV (reports.tables: results, table, published, manifests)
    <run>/report_tables.md                 the same tables as Markdown
    <run>/gate_speed.json                  the gate's re-timed speed figures (harness.gate.retiming), added later
    <run>/engine/<model>/                  an engine-served model's server log and launch record
    <run>/run.lock                         while a run writes the folder: its pid, host and start time
                                           (harness.run.lock; a killed run's is taken over)

A bare results JSON (``some/name.json``) is read as a run whose samples would sit beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from harness.errors import RunError, UserError
from harness.files import JSONLError, read_jsonl, write_atomic, write_json_atomic, write_jsonl_atomic
from harness.run.records import RecordError, ResultEntry, ResultsFile, SampleRecord, as_json
from harness.run.store import SampleStore, safe_name

RESULTS_NAME = "results.json"
REPORT_NAME = "report.html"
TABLES_MARKDOWN_NAME = "report_tables.md"
GATE_SPEED_NAME = "gate_speed.json"


class RunLoadError(UserError, ValueError):
    """A run folder or results file that cannot be read; the message is one line for the user."""


def check_writable(root: Path) -> None:
    """Create the run folder and write a probe file in it, so a folder the run cannot write fails before any model
    loads, with one line (RunError)."""
    root = Path(root)
    blocking = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise RunError(f"output {root}: {blocking} is a file, not a folder (choose another --output)")
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=root)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise RunError(f"output folder {root} is not writable ({error.strerror or error}); choose another "
                       f"--output") from None


def first_missing(root: Path) -> Path | None:
    """The outermost folder of ``root``'s path that does not exist yet (what creating ``root`` would add)."""
    missing = None
    for path in (root, *root.parents):
        if path.exists():
            break
        missing = path
    return missing


def holds_files(root: Path) -> bool:
    """Whether any file lies under ``root`` (empty folders do not count)."""
    return any(not path.is_dir() for path in root.rglob("*"))


@contextmanager
def removed_if_left_empty(root: Path) -> Iterator[None]:
    """Run the body; if it fails and the folders it created for ``root`` hold no file, remove them, so a run that
    fails at planning (a bad option, an unknown checkpoint, no data) leaves no empty run folder to puzzle over. A
    folder that existed before, or holds a stored sample, stays."""
    created = first_missing(Path(root))
    try:
        yield
    except BaseException:
        if created is not None and created.is_dir() and not holds_files(created):
            shutil.rmtree(created, ignore_errors=True)
        raise


@dataclass(frozen=True)
class RunFolder:
    """Paths, readers and writers of one run folder (or of a report folder: only the report and its tables)."""

    root: Path
    results_name: str = RESULTS_NAME
    store_dir: Path | None = None  # the resume store's root when not <run>/store

    @classmethod
    def at(cls, path: Path) -> "RunFolder":
        """A run folder, or the folder of a bare results JSON file."""
        path = Path(path)
        return cls(path.parent, path.name) if path.is_file() else cls(path)

    @property
    def results_path(self) -> Path:
        return self.root / self.results_name

    @property
    def report_path(self) -> Path:
        return self.root / REPORT_NAME

    def table_path(self, table: str) -> Path:
        """One report table as CSV, by the table's short name (``results`` -> ``report_results.csv``)."""
        return self.root / f"report_{table}.csv"

    @property
    def tables_markdown_path(self) -> Path:
        return self.root / TABLES_MARKDOWN_NAME

    @property
    def gate_speed_path(self) -> Path:
        return self.root / GATE_SPEED_NAME

    def samples_path(self, model: str, task: str) -> Path:
        return self.root / "samples" / safe_name(model) / f"{safe_name(task)}.jsonl"

    @property
    def store_root(self) -> Path:
        return self.store_dir if self.store_dir is not None else self.root / "store"

    def engine_path(self, model: str) -> Path:
        """Where an adapter that runs an outside server keeps its files (given to its ``session``)."""
        return self.root / "engine" / safe_name(model)

    def store(self, model: str, task: str, rank: int = 0) -> SampleStore:
        """This writer's shard of the resume store of one (model, task); loading reads every shard."""
        return SampleStore(self.store_root / safe_name(model) / safe_name(task), shard=f"rank{rank}")

    # ---- writers -------------------------------------------------------------------------------------------------
    def write_results(self, results: ResultsFile) -> Path:
        write_json_atomic(self.results_path, results.to_json())
        return self.results_path

    def write_samples(self, model: str, task: str, records: Sequence[SampleRecord]) -> Path:
        path = self.samples_path(model, task)
        write_jsonl_atomic(path, as_json(records))
        return path

    def write_table(self, table: str, csv_text: str) -> Path:
        """A report table, already rendered as CSV (this module does not know pandas)."""
        path = self.table_path(table)
        write_atomic(path, csv_text)
        return path

    def write_tables_markdown(self, text: str) -> Path:
        write_atomic(self.tables_markdown_path, text)
        return self.tables_markdown_path

    def write_gate_speed(self, payload: dict[str, Any]) -> Path:
        write_json_atomic(self.gate_speed_path, payload)
        return self.gate_speed_path

    # ---- readers -------------------------------------------------------------------------------------------------
    def read_results(self) -> ResultsFile:
        """The results file, checked for the keys the report and gate read; RunLoadError with one line."""
        path = self.results_path
        if not path.is_file():
            raise RunLoadError(f"{self.root} is a folder without {self.results_name} (not a finished run)")
        try:
            return ResultsFile.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as error:
            raise RunLoadError(f"cannot read {path}: {error}") from None
        except json.JSONDecodeError as error:
            raise RunLoadError(f"{path} is not valid JSON ({error.msg} at line {error.lineno})") from None
        except RecordError as error:
            raise RunLoadError(f"{path}: {error}") from None

    def read_samples(self, model: str, task: str) -> list[SampleRecord] | None:
        """The scored sample records of one (model, task), or None when the run carries none (a bare results file)."""
        path = self.samples_path(model, task)
        if not path.is_file():
            return None
        records = []
        try:
            for number, line in read_jsonl(path):
                try:
                    record = SampleRecord.from_json(line)
                except RecordError as error:
                    raise RunLoadError(f"{path}: line {number} is not a scored sample record ({error})") from None
                if record.doc_id is None or not record.scored:
                    raise RunLoadError(f"{path}: line {number} is not a scored sample record")
                records.append(record)
        except JSONLError as error:
            raise RunLoadError(f"{path}: line {error.line} is not valid JSON") from None
        return records

    def read_gate_speed(self) -> Any | None:
        """The parsed ``gate_speed.json``, or None when the run has none; unreadable JSON is a RunLoadError. Its
        format is checked by harness.gate.retiming, which owns it."""
        path = self.gate_speed_path
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise RunLoadError(f"cannot read {path}: {error}") from None


@dataclass(frozen=True)
class Run:
    """A finished run: its results file and the folder its sample records live in."""

    name: str
    folder: RunFolder
    file: ResultsFile

    @property
    def manifest(self) -> dict[str, Any]:
        return self.file.manifest

    @property
    def results(self) -> tuple[ResultEntry, ...]:
        return self.file.results

    @property
    def attribution(self) -> tuple[dict[str, Any], ...]:
        return self.file.attribution

    @property
    def results_path(self) -> Path:
        return self.folder.results_path

    @property
    def root(self) -> Path:
        return self.folder.root

    def result(self, model: str, task: str) -> ResultEntry | None:
        return self.file.result(model, task)

    def samples(self, model: str, task: str) -> list[SampleRecord] | None:
        return self.folder.read_samples(model, task)


def load_run(path: Path) -> Run:
    """Read a run folder or a results JSON file; raises RunLoadError with a one-line reason."""
    path = Path(path)
    if not path.exists():
        raise RunLoadError(f"{path} does not exist")
    folder = RunFolder.at(path)
    name = folder.root.name if folder.results_name == RESULTS_NAME else Path(folder.results_name).stem
    return Run(name=name, folder=folder, file=folder.read_results())
