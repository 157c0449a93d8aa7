"""The errors a command reports to its user as one line; a leaf, so every package (models and tasks included) can
raise them without importing anything else of the harness."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

USAGE_ERROR = 2  # the exit status of every command that ends on a UserError
DISK_FULL = 3  # the exit status of a run stopped by a full disk (DiskFull): rerunning it resumes


class UserError(Exception):
    """An error whose message is one line for the user: every command line prints it and exits ``USAGE_ERROR``.

    Each subclass keeps its builtin base too (``ValueError`` for bad input, ``RuntimeError`` for a failed step), so
    callers that catch those still do."""


class RunError(UserError, RuntimeError):
    """A run that cannot go on."""


class UsageError(UserError, ValueError):
    """Bad command-line input (a run's, a sweep's)."""


class NothingToScore(RunError):
    """``--rescore`` on a folder without stored samples: exit status 1, neither a usage error nor a success."""


class DiskFull(RunError):
    """A write failed for want of space, quota or a writable file system (harness.run.space): exit ``DISK_FULL``."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises ``error`` (a ``UserError`` class) instead of printing its usage block, so every bad input
    to a command ends in one line."""

    def __init__(self, *args: Any, error: type[UserError] = UsageError, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error_class = error

    def error(self, message: str) -> NoReturn:
        raise self.error_class(message)


def one_line_failure(command: str, failure: SystemExit | UserError | OSError, writing: str = "its files",
                     status: int = USAGE_ERROR) -> int:
    """A subcommand's exit status for what stopped it, its one line on stderr: --help's own exit, a ``UserError``
    (``status``), or an OSError writing ``writing`` (``USAGE_ERROR``)."""
    if isinstance(failure, SystemExit):
        return int(failure.code or 0)
    if isinstance(failure, UserError):
        print(f"{command}: error: {failure}", file=sys.stderr)
        return status
    print(f"{command}: error: cannot write {writing}: {failure}", file=sys.stderr)
    return USAGE_ERROR
