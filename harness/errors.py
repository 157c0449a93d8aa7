"""The errors a command reports to its user as one line; a leaf, so every package (models and tasks included) can
raise them without importing anything else of the harness."""

from __future__ import annotations

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
