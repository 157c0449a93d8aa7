"""The task registry: names a user can pass to ``--tasks``."""

from __future__ import annotations

from typing import Callable

from tasks.base import Task
from tasks.gsm8k import GSM8K

TASKS: dict[str, Callable[[], Task]] = {
    "gsm8k": GSM8K,
}


def task_names() -> list[str]:
    return list(TASKS)


def make_task(name: str) -> Task:
    return TASKS[name]()
