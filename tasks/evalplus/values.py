"""Turn the sandbox's encoded outputs (tasks/evalplus/child.py ``encode``) back into Python values in the harness.

The tree came from code a model wrote, so reading it must not run anything: only JSON scalars, builtin containers
and numeric numpy values are built. Where evalplus, comparing in the solution's own process, would see a type we
cannot rebuild, the value keeps what the comparison needs:

* a subclass of a builtin (namedtuple, Counter, IntEnum, ...) becomes a private subclass of that builtin, so ``==``
  behaves like the base while ``type(out) == type(exp)`` (evalplus's check before ``np.allclose``) is still false;
* ``dict.keys()``/``dict.items()`` become a frozenset subclass (they compare equal to sets, as views do);
* anything else becomes ``Opaque``: equal to nothing but itself, not None, and iterable when the child could list
  its items (evalplus's set-comparison oracle iterates the output).

A malformed tree raises ``PayloadError``; the caller scores that output as wrong.
"""

from __future__ import annotations

import base64
from typing import Any, Iterator

import numpy as np

from tasks.evalplus.child import MAX_DEPTH, NUMERIC_KINDS


class PayloadError(ValueError):
    """The encoded output is not a tree the child writes."""


class Opaque:
    """An output with no data form: equal only to itself, like most objects under ``==``."""

    __slots__ = ("type_name", "items")

    def __init__(self, type_name: str, items: list[Any] | None) -> None:
        self.type_name = type_name
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        if self.items is None:
            raise TypeError(f"{self.type_name} could not be listed in the sandbox")
        return iter(self.items)

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


class DictView(frozenset):
    """What ``dict.keys()`` or ``dict.items()`` became: set-like under ``==``, but not a set's type."""


def _subclass(base: type) -> type:
    return type(f"Sub{base.__name__.capitalize()}", (base,), {"__module__": __name__, "__doc__":
                f"A value of a {base.__name__} subclass: compares as a {base.__name__}, is not one by type."})


_SUBCLASSES: dict[type, type] = {base: _subclass(base) for base in
                                 (int, float, complex, str, bytes, tuple, list, dict, set, frozenset)}
_CONTAINERS: dict[str, type] = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}


def _items(node: list, index: int) -> list:
    if len(node) <= index or not isinstance(node[index], list):
        raise PayloadError(f"{node[0]!r} without its items")
    return node[index]


def _numeric_dtype(text: Any) -> np.dtype:
    if not isinstance(text, str) or len(text) > 8:
        raise PayloadError(f"bad numpy dtype {text!r}")
    try:
        dtype = np.dtype(text)
    except TypeError:
        raise PayloadError(f"bad numpy dtype {text!r}") from None
    if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise PayloadError(f"numpy dtype {text!r} is not numeric")
    return dtype


def decode(node: Any, depth: int = 0) -> Any:
    """The Python value an encoded tree stands for."""
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if depth > MAX_DEPTH + 2:
        raise PayloadError("nested too deeply")
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise PayloadError(f"not an encoded value: {str(node)[:60]}")
    tag, inner = node[0], depth + 1
    try:
        if tag in _CONTAINERS:
            return _CONTAINERS[tag](decode(item, inner) for item in _items(node, 1))
        if tag == "dict":
            return {decode(k, inner): decode(v, inner) for k, v in _items(node, 1)}
        if tag == "int":
            return int(node[1], 16)
        if tag == "complex":
            return complex(float(node[1]), float(node[2]))
        if tag in ("bytes", "bytearray"):
            raw = base64.b64decode(node[1], validate=True)
            return raw if tag == "bytes" else bytearray(raw)
        if tag in ("keys", "items"):
            return DictView(decode(item, inner) for item in _items(node, 1))
        if tag == "sub":
            value = decode(node[2], inner)
            return _SUBCLASSES[type(value)](value)
        if tag == "np":
            return _numeric_dtype(node[1]).type(decode(node[2], inner))
        if tag == "ndarray":
            dtype, shape = _numeric_dtype(node[1]), tuple(int(n) for n in node[2])
            return np.array(decode(node[3], inner), dtype=dtype).reshape(shape)
        if tag == "opaque":
            items = node[2]
            return Opaque(str(node[1]), None if items is None else [decode(item, inner) for item in items])
    except PayloadError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as error:
        raise PayloadError(f"bad {tag!r} value ({type(error).__name__})") from None
    raise PayloadError(f"unknown tag {tag!r}")
