"""The lm-eval model plugin: ``lm_eval --model refusion ...`` with the pinned lm-eval 0.4.13.

The package declares its models in the entry-point group ``lm_eval.models`` (pyproject.toml), the group lm-eval
reads itself from the release that added model plugins (EleutherAI/lm-evaluation-harness#4013) on. 0.4.13 reads no
entry points: its registry holds only the built-ins of ``lm_eval/models/__init__.py``. So the package also installs
``dllm_harness_lmeval.pth`` (setup.py), whose one line calls ``install()`` at interpreter start. That only puts a
finder on ``sys.meta_path``; nothing else is imported until a program imports lm-eval's model registry, and right
after that module has run the finder adds the entry points to it as lazy placeholders. lm-eval itself is not
patched, and with a plugin-reading release the second registration is a no-op.
"""

from __future__ import annotations

import logging
import sys
from importlib.machinery import ModuleSpec
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any, Sequence

ENTRY_POINT_GROUP = "lm_eval.models"
REGISTRY_MODULE = "lm_eval.api.registry"

logger = logging.getLogger(__name__)


def same_target(existing: Any, entry_point: EntryPoint) -> bool:
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


def register_quietly() -> None:
    """``register_models`` for the import hook: a plugin must never stop lm-eval from loading."""
    try:
        register_models()
    except Exception as error:  # noqa: BLE001  (reported, and lm-eval goes on with its built-ins)
        logger.warning("dllm-harness: lm-eval models not registered: %s", error)


class RegisterAfterRegistryImport:
    """A meta-path finder that finds nothing itself: when lm-eval's registry module is about to load, it asks the
    other finders for the real spec and makes that loader call ``register_quietly`` once the module has run."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name != REGISTRY_MODULE:
            return None
        uninstall()
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        run_module = getattr(spec.loader, "exec_module", None)
        if run_module is None:
            return spec

        def run_then_register(module: ModuleType) -> None:
            run_module(module)
            register_quietly()

        spec.loader.exec_module = run_then_register  # a file loader is made per module: this one is ours
        return spec


def installed() -> bool:
    return any(isinstance(finder, RegisterAfterRegistryImport) for finder in sys.meta_path)


def install() -> None:
    """Called by the ``.pth`` line at start-up; registers at once when the registry is already loaded."""
    if REGISTRY_MODULE in sys.modules:
        register_quietly()
    elif not installed():
        sys.meta_path.insert(0, RegisterAfterRegistryImport())  # ahead of the finder that would load it


def uninstall() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, RegisterAfterRegistryImport)]
