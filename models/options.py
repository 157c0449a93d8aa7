"""Typed options: the one place where a ``--model-arg`` string or a registry/preset value becomes a config field.

A model's config is a tree of frozen dataclasses (template options, a decoder config, a Fast-dLLM config holding the
plain one); every leaf field has a unique name, and options address leaves by that name. Each value is coerced to
the field's annotated type (bool, int, float, str, ``X | None``, ``Literal`` choices) and a wrong one is a one-line
``ConfigError`` naming the option, the value and the expected type. Canvas and token-id fields are the adapter's
(see ``models.decoders.contract``) and are not options.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from models.decoders.contract import FILLED, ConfigError

KEYED = "keyed"  # field metadata: False for an option that says how to run, never what comes out
WHEN_SET = "when set"  # KEYED's value for an option in the key only away from its default


# Options that choose the weights, not the decoding: read once, where the model's adapter is made
# (models.registry.load_adapter), and keyed by what they load (a LoRA's file hash in the model's identity), never by
# their text, so a moved adapter folder keeps its stored samples. ``adapter``: a PEFT LoRA folder merged at load.
ADAPTER = "adapter"
LOAD_OPTIONS: dict[str, Any] = {ADAPTER: str | None}


def split_load_options(owner: str, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the load options among ``values``, typed; the other options, as given)."""
    loads = {name: coerce(owner, name, value, LOAD_OPTIONS[name]) for name, value in values.items()
             if name in LOAD_OPTIONS}
    return loads, {name: value for name, value in values.items() if name not in LOAD_OPTIONS}


def added_field(default: Any) -> Any:
    """An option added after results were stored with its default behaviour: in ``record`` (and so in sample keys)
    only when set to something else, so those results stay valid and a run made before it resumes."""
    return field(default=default, metadata={KEYED: WHEN_SET})


def unkeyed_field(default: Any) -> Any:
    """An option that says where or how long to run (a server, a timeout), never what is generated: typed and set
    like any other, but left out of ``record``, so a changed value keeps every stored sample valid."""
    return field(default=default, metadata={KEYED: False})


@dataclass(frozen=True)
class Leaf:
    path: tuple[str, ...]  # field names from the root to this leaf
    field: dataclasses.Field
    hint: Any  # the resolved annotation
    value: Any

    @property
    def settable(self) -> bool:
        return FILLED not in self.field.metadata


def leaves(config: Any) -> dict[str, Leaf]:
    """Every leaf of a config tree by name (nested dataclass instances are walked, not listed)."""
    out: dict[str, Leaf] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        hints = typing.get_type_hints(type(node))
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                walk(value, path + (f.name,))
                continue
            if f.name in out:
                raise TypeError(f"{type(node).__name__}: leaf name {f.name} is used twice in one config")
            out[f.name] = Leaf(path + (f.name,), f, hints[f.name], value)

    walk(config, ())
    return out


def _optional(hint: Any) -> tuple[Any, bool]:
    """(the non-None type, whether None is allowed)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else Union[tuple(args)]), len(args) < len(typing.get_args(hint))
    return hint, False


def type_name(hint: Any) -> str:
    inner, optional = _optional(hint)
    if typing.get_origin(inner) is Literal:
        name = "one of " + ", ".join(map(str, typing.get_args(inner)))
    else:
        name = {bool: "bool", int: "int", float: "float", str: "str"}.get(inner, str(inner))
    return f"{name} or none" if optional else name


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def coerce(owner: str, name: str, value: Any, hint: Any) -> Any:
    """``value`` (a CLI string or a python value) as the type ``hint`` names, or a one-line ConfigError."""
    inner, optional = _optional(hint)
    text = value.strip() if isinstance(value, str) else None
    if value is None or (optional and text is not None and text.lower() in ("none", "null")):
        if optional:
            return None
        raise ConfigError(f"{owner}: option {name}=none is not allowed (expected {type_name(hint)})")

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{owner}: option {name}={value} is not {expected}")

    if typing.get_origin(inner) is Literal:
        choices = typing.get_args(inner)
        if value not in choices:
            raise bad(f"one of {', '.join(map(str, choices))}")
        return value
    if inner is bool:
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise bad("a bool (true or false)")
    if inner is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text is not None:
            try:
                return int(text)
            except ValueError:
                pass
        raise bad("an int")
    if inner is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            result = float(value)
        else:
            try:
                result = float(text) if text is not None else math.nan
            except ValueError:
                result = math.nan
            if text is None or math.isnan(result):
                raise bad("a float")
        return result
    if inner is str:
        if isinstance(value, str):
            return value
        raise bad("a str")
    return value  # a field without a plain type (token ids): only the adapter sets those


def set_options(config: Any, values: dict[str, Any], owner: str, adapter_fields: bool = False,
                seed: int | None = None) -> Any:
    """``config`` with ``values`` (leaf name -> value) coerced and applied, and ``seed`` as the seed leaf where
    that is left None (unset, or set to none); nested configs are rebuilt with ``dataclasses.replace``.
    Canvas and token-id fields are only accepted with ``adapter_fields``."""
    if not values and seed is None:
        return config
    table = leaves(config)
    valid = {name: leaf for name, leaf in table.items() if adapter_fields or leaf.settable}
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ConfigError(f"{owner}: unknown option {', '.join(unknown)}; valid options: {', '.join(sorted(valid))}")
    by_path = {valid[name].path: coerce(owner, name, value, valid[name].hint) for name, value in values.items()}
    leaf = table.get("seed")
    if seed is not None and leaf is not None and by_path.get(leaf.path, leaf.value) is None:
        by_path[leaf.path] = seed  # a sampler left without a seed takes the run's, so sampled runs reproduce
    return _replace_paths(config, by_path)


def replace_leaves(config: Any, **values: Any) -> Any:
    """``dataclasses.replace`` by leaf name through nested configs, values as given (for code and tests that build
    configs directly; user input goes through ``set_options``)."""
    table = leaves(config)
    unknown = sorted(set(values) - set(table))
    if unknown:
        raise ConfigError(f"unknown field {', '.join(unknown)}; valid: {', '.join(table)}")
    return _replace_paths(config, {table[name].path: value for name, value in values.items()})


def _replace_paths(node: Any, by_path: dict[tuple[str, ...], Any]) -> Any:
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(node):
        mine = {p[1:]: v for p, v in by_path.items() if p[0] == f.name}
        if not mine:
            continue
        changes[f.name] = mine[()] if () in mine else _replace_paths(getattr(node, f.name), mine)
    return dataclasses.replace(node, **changes)


def option(config: Any, name: str) -> Any:
    """The value of leaf ``name``."""
    return leaves(config)[name].value


def record(config: Any) -> dict[str, Any]:
    """A config as a flat {leaf: value} dict for manifests and sample keys; token ids (the checkpoint's, filled
    at decode time) and runtime options are left out, the canvas is kept."""
    return {name: leaf.value for name, leaf in leaves(config).items()
            if leaf.field.metadata.get(FILLED) != "token_id" and _keyed(leaf)}


def _keyed(leaf: Leaf) -> bool:
    keyed = leaf.field.metadata.get(KEYED, True)
    return leaf.value != leaf.field.default if keyed == WHEN_SET else bool(keyed)


def describe(config: Any) -> list[str]:
    """``name=default (type)`` of every option a user can set, for ``--list``."""
    return [f"{name}={leaf.value} ({type_name(leaf.hint)})" for name, leaf in leaves(config).items()
            if leaf.settable]
