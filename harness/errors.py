"""The errors a run reports to its user as one line; a leaf, so every part of the harness can raise them."""

from __future__ import annotations


class RunError(RuntimeError):
    """A run that cannot go on; the message is one line for the user."""


class UsageError(ValueError):
    """Bad command-line input (a run's, a sweep's); the message is one line for the user."""


class NothingToScore(RunError):
    """``--rescore`` on a folder without stored samples: exit status 1, neither a usage error nor a success."""
