"""Every one-line error shares ``UserError``, so each command line catches the one base; each keeps its builtin base."""

from __future__ import annotations

import pytest

from harness.errors import NothingToScore, RunError, UsageError, UserError
from harness.gate.retiming import SpeedError
from harness.gate.verdict import GateError
from harness.lmeval.model import HarnessLMError
from harness.run.folder import RunLoadError
from harness.stats.significance import PairingError
from models.adapters.engine.server import EngineError
from models.decoders.contract import ConfigError
from models.networks.loading import CheckpointError
from models.real_tokenizer import TokenizerFetchError
from models.sources import ModelLoadError
from reports.report_data import ReportError
from tasks.records import DataError

BAD_INPUT = (UsageError, SpeedError, GateError, HarnessLMError, RunLoadError, PairingError, ConfigError,
             CheckpointError, ModelLoadError, ReportError, DataError)
FAILED_STEP = (RunError, NothingToScore, EngineError, TokenizerFetchError)


@pytest.mark.parametrize("error", BAD_INPUT + FAILED_STEP, ids=lambda e: e.__name__)
def test_every_one_line_error_is_a_user_error(error):
    assert issubclass(error, UserError)
    assert issubclass(error, ValueError if error in BAD_INPUT else RuntimeError)


def test_the_command_line_prints_a_user_error_in_one_line(monkeypatch, capsys):
    from harness import cli

    def fail(argv):
        raise CheckpointError("checkpoint x lacks tensor y")

    monkeypatch.setattr(cli, "run_main", fail)
    assert cli.main(["--models", "tiny-qwen3"]) == 2
    assert capsys.readouterr().err == "error: checkpoint x lacks tensor y\n"
