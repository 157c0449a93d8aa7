"""The family declarations (models/families/) agree with the code they name: each adapter path is a class of that
kind, each network kind an adapter loads is declared, each entry's kind, tiny checkpoint and preset tasks exist, and
the tables built from them are what the registry, the loader and the tiny models serve."""

from __future__ import annotations

import subprocess
import sys

import pytest

from models.families import ADAPTERS, FAMILIES, LM_EVAL_ALIASES, MODELS, NETWORK_KINDS, TINY_MODELS, _unique
from models.networks import loading
from models.registry import adapter_class
from models import registry, tiny
from tasks.registry import task_names


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_each_adapter_path_is_a_class_of_its_kind(kind):
    cls = adapter_class(kind)
    assert cls.kind == kind
    network_kind = getattr(cls, "network_kind", None)
    assert network_kind is None or network_kind in NETWORK_KINDS


def test_every_entry_names_a_declared_kind_checkpoint_and_tasks():
    tasks = set(task_names())
    for spec in MODELS.values():
        assert spec.kind in ADAPTERS, spec.name
        assert not spec.ref.startswith("tiny-") or spec.ref in TINY_MODELS, spec.name
        for preset, per_task in spec.presets.items():
            assert set(per_task) <= tasks, (spec.name, preset, sorted(set(per_task) - tasks))
    assert all(alias.model in MODELS for alias in LM_EVAL_ALIASES.values())


def test_each_family_declares_its_own_kinds_and_entries():
    """A family's entries run on its own adapter kinds, so adding a family touches its module only."""
    for family in FAMILIES:
        assert family.models, family.name
        assert {spec.kind for spec in family.models} <= set(family.adapters), family.name


def test_the_registry_loader_and_tiny_models_serve_the_declarations():
    assert registry.ADAPTERS is ADAPTERS and registry.MODELS is MODELS and tiny.TINY_MODELS is TINY_MODELS
    assert loading.NETWORK_KINDS is NETWORK_KINDS
    with pytest.raises(ValueError, match="unknown network kind 'nope'"):
        loading.load_network("unused", "nope")


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ValueError, match="model 'x' is declared twice"):
        _unique("model", [("x", 1), ("x", 2)])


def test_listing_the_registry_imports_no_adapter():
    """``--list`` reads the declarations; adapters (and what they import) load only when a model runs."""
    code = ("import sys, models.registry; "
            "print(sorted(m for m in sys.modules if m.startswith('models.adapters')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
