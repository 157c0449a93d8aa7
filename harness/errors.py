"""The error a run reports to its user as one line; a leaf, so every part of the run loop can raise it."""

from __future__ import annotations


class RunError(RuntimeError):
    """A run that cannot go on; the message is one line for the user."""


class NothingToScore(RunError):
    """``--rescore`` on a folder without stored samples: exit status 1, neither a usage error nor a success."""
