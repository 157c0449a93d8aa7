"""LiveCodeBench code generation as a harness task: lcb_runner's chat prompt, its code extraction, its judge.

Three selections are registered (tasks/registry.py): ``livecodebench`` is the whole ``release_v6`` (1055 problems,
May 2023 - Apr 2025), ``livecodebench_v5`` and ``livecodebench_v6`` the contest-date windows papers report as
"LiveCodeBench v5" (``release_v5``, 2024-08-01 .. 2025-02-01) and "v6" (``release_v6``, 2025-02-01 .. 2025-05-01).
One greedy answer per problem, so pass@1 is the pass rate; results are also reported per difficulty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from tasks.base import Doc, SampleScore, Task, TaskPrompt
from tasks.evalplus.output_compare import Verdict
from tasks.livecodebench.dataset import (FIELDS, HUB_ID, LOCAL_FOLDER, Selection, check_record, load, problem,
                                         release_files)
from tasks.livecodebench.judge import TIMEOUT_S, judge
from tasks.livecodebench.prompt import STOP, SYSTEM_MESSAGE, extract_code, user_message
from tasks.records import DatasetSpec, LoadedData

PASS_AT_1 = "pass@1,none"
WHOLE_V6 = Selection("release_v6")
WINDOW_V5 = Selection("release_v5", "2024-08-01", "2025-02-01")
WINDOW_V6 = Selection("release_v6", "2025-02-01", "2025-05-01")


def dataset_spec(selection: Selection) -> DatasetSpec:
    """What manifests and ``--list`` show; loading goes through tasks/livecodebench/dataset.py."""
    files = release_files(selection.version)
    return DatasetSpec(hub_id=HUB_ID, config=selection.describe(), split="test",
                       local_file=f"{LOCAL_FOLDER}/{' .. '.join(dict.fromkeys((files[0], files[-1])))}",
                       fixture=f"livecodebench_{files[-1]}",
                       required_fields=FIELDS, check=check_record)


def sample_score(code: str, output: str, result: Verdict) -> SampleScore:
    return SampleScore(
        target="",  # the tests are the target; they stay in the dataset, not in every sample record
        extracted={"none": code},
        scores={PASS_AT_1: float(result.passed)},
        diagnostics={"empty": not output.strip(), "invalid": not code.strip(), "exec_status": result.status,
                     "exec_detail": result.detail},
    )


class LiveCodeBench(Task):
    primary_metric = PASS_AT_1
    metrics = (PASS_AT_1,)
    canvas_tokens = 2048  # lcb_runner's max_tokens is 2000; rounded up to whole blocks of the diffusion decoders
    equivalent_lm_eval_task = "none (lcb_runner codegeneration, generic chat prompt)"

    def __init__(self, name: str = "livecodebench", selection: Selection = WHOLE_V6, timeout: float = TIMEOUT_S,
                 workers: int | None = None) -> None:
        """``timeout``: seconds per test (lcb_runner's ``--timeout``); ``workers``: sandboxes at once."""
        self.name, self.selection, self.timeout, self.workers = name, selection, timeout, workers
        self.version = f"livecodebench-lcb_runner-generic-1-{selection.describe().replace(' ', '')}"
        self.dataset = dataset_spec(selection)

    def load(self, source: str, data_dir: Path | None) -> LoadedData:
        return load(self.selection, source, data_dir)

    def docs(self, records: Sequence[dict[str, Any]]) -> list[Doc]:
        return [Doc(id=str(r["question_id"]), data=r, group=r["difficulty"]) for r in records]

    def prompt(self, doc: Doc) -> TaskPrompt:
        return TaskPrompt(user=user_message(doc.data["question_content"], doc.data["starter_code"]),
                          system=SYSTEM_MESSAGE, stop=STOP)

    def check_ready(self) -> None:
        from tasks.execution import check_canary

        check_canary()

    def score(self, docs: Sequence[Doc], outputs: Sequence[str]) -> list[SampleScore]:
        codes = [extract_code(output) for output in outputs]
        verdicts = judge([problem(doc.data) for doc in docs], codes, self.timeout, self.workers)
        return [sample_score(code, output, result) for code, output, result in zip(codes, outputs, verdicts)]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "selection": self.selection.describe(), "timeout_per_test_s": self.timeout,
                "scorer": "lcb_runner's judge (stdin and functional tests) in the harness sandbox"}
