"""``dllm-lm-eval``: lm-eval's own command line, with this package's lm-eval models registered.

The package declares its models in the entry-point group ``lm_eval.models`` (pyproject.toml), the plugin group
lm-eval reads from the release that added model plugins (EleutherAI/lm-evaluation-harness#4013) on; there
``lm_eval --model refusion ...`` works as it is. lm-eval 0.4.13 reads no entry points (its registry holds only the
built-ins listed in ``lm_eval/models/__init__.py``), so this command loads the same group into its registry and
then runs ``lm_eval``'s CLI unchanged: every option and output is lm-eval's. It also points the models' speed files
at ``--output_path``. In Python, call ``register_models()`` before ``simple_evaluate(model="refusion", ...)``, or
pass a model instance.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Sequence

ENTRY_POINT_GROUP = "lm_eval.models"
USAGE_ERROR = 2

logger = logging.getLogger(__name__)


def same_target(existing: Any, entry_point: Any) -> bool:
    """A placeholder (the entry point itself) or the class it already turned into."""
    if isinstance(existing, type):
        return f"{existing.__module__}:{existing.__qualname__}" == entry_point.value
    return isinstance(existing, EntryPoint) and existing == entry_point


def register_models() -> list[str]:
    """Add every ``lm_eval.models`` entry point to lm-eval's model registry as a lazy placeholder; built-in names
    win over plugins. Returns the names now served by entry points."""
    import lm_eval.models  # noqa: F401  (built-ins first: lm-eval skips them when the registry is not empty)
    from lm_eval.api.registry import model_registry

    registered = dict(model_registry.items())
    names = []
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        existing = registered.get(entry_point.name)
        if existing is None:
            model_registry.register(entry_point.name, target=entry_point)
        elif not same_target(existing, entry_point):
            logger.warning("lm-eval already has a model named %r; the plugin %s is not registered",
                           entry_point.name, entry_point.value)
            continue
        names.append(entry_point.name)
    return names


def speed_folder(argv: Sequence[str]) -> str | None:
    """lm-eval's ``--output_path`` (a folder, or a results file whose folder is meant)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--output_path", "-o")
    known, _ = parser.parse_known_args(list(argv))
    if not known.output_path:
        return None
    path = Path(known.output_path)
    return str(path.parent if path.suffix == ".json" else path)


def user_errors() -> tuple[type[BaseException], ...]:
    from harness.cli import user_errors as harness_errors
    from harness.lmeval_model import HarnessLMError

    return (*harness_errors(), HarnessLMError, NotImplementedError)


def main(argv: Sequence[str] | None = None) -> int:
    from harness.lmeval_model import SPEED_OUTPUT_ENV
    from lm_eval.__main__ import cli_evaluate

    args = list(sys.argv[1:] if argv is None else argv)
    register_models()
    folder = speed_folder(args)
    if folder and SPEED_OUTPUT_ENV not in os.environ:
        os.environ[SPEED_OUTPUT_ENV] = folder
    sys.argv = ["lm-eval", *args]  # lm-eval's parser reads sys.argv itself
    try:
        cli_evaluate()
    except user_errors() as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    return 0
