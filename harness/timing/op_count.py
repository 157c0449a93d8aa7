"""Exact counts of what a decode step costs a GPU beyond the network: ops launched outside forwards and host reads.

On a GPU every aten op outside the network's forward is (at least) a kernel launch, and every read of a device value
by the host (``.item()``, ``.tolist()``, ``nonzero``, boolean indexing, a Python ``if`` on a tensor) waits for the
queue to drain. Both are counted here on any device, so they can be compared across batch sizes on a CPU box:

* ops: a ``TorchDispatchMode`` sees every aten op; those dispatched while a network module is running (its forward
  hooks bracket the call) are the forward's and are counted apart.
* host reads: the ops whose result the host must wait for (``_local_scalar_dense`` is what ``item``, ``bool``,
  ``int`` and ``float`` of a tensor reduce to; ``nonzero`` and the ops built on it; ``equal``; indexing with a boolean
  mask), plus the Python-level reads that dispatch nothing on a CPU tensor (``tolist``, ``numpy``, ``cpu``).
* bytes copied: what the copy-like ops outside forwards wrote (``COPY_OPS``), the memory traffic of moving data
  around (a cache copied when rows join or leave, a canvas gathered and scattered back) as opposed to computing.
  An op is copy-like when its job is to move elements of its tensor inputs, not to compute new values: copies and
  dtype or device conversions, concatenation, indexing, gathers and scatters, selections by mask (``where``,
  ``masked_fill``), repeats and pads. What is counted is the bytes it wrote: out of place, its output (a new
  tensor, all of it written), nothing when it handed back an input (``to`` or ``contiguous`` of a tensor already
  so); in place, the part it wrote (``copy_``: the destination; ``index_put_``: the indexed elements; ``scatter_``:
  one element per index; ``masked_scatter_``: one per true mask element; ``index_copy_`` and ``put_``: the source's
  elements). Constants written in place (``fill_``, ``zero_``, ``masked_fill_``, ``index_fill_``) move no data and
  are not counted, nor is anything a network call does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

READ_OPS = frozenset({"aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::nonzero",
                      "aten::nonzero_numpy", "aten::nonzero_static", "aten::masked_select", "aten::equal",
                      "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive"})
INDEX_OPS = frozenset({"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"})
PYTHON_READS = ("tolist", "numpy", "cpu")
# ops that only relabel a tensor or wrap a host value (no kernel runs on any device)
NO_KERNEL_OPS = frozenset({"aten::view", "aten::_unsafe_view", "aten::alias", "aten::detach", "aten::t", "aten::expand",
                           "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::transpose", "aten::slice",
                           "aten::select", "aten::as_strided", "aten::reshape", "aten::unbind", "aten::split",
                           "aten::split_with_sizes", "aten::chunk", "aten::narrow", "aten::lift_fresh",
                           "aten::diagonal", "aten::unfold", "aten::view_as_real", "aten::view_as_complex",
                           "aten::_reshape_alias", "aten::detach_", "aten::resolve_conj", "aten::resolve_neg"})

# copy-like ops (module docstring): those that write a new tensor (counted: its bytes, unless it is an input) and
# those that write into their first argument (counted: the part written, ``_written_in_place``). Both the names seen
# under ``torch.inference_mode`` (where composite ops such as ``to``, ``contiguous``, ``reshape`` and ``pad`` reach
# the dispatch mode whole) and their decompositions (``_to_copy``, ``clone``, ``constant_pad_nd``) are listed.
COPY_OPS_OUT = frozenset({
    "aten::_to_copy", "aten::to", "aten::type_as", "aten::contiguous", "aten::clone", "aten::copy",
    "aten::lift_fresh_copy", "aten::reshape", "aten::flatten", "aten::cat", "aten::concat", "aten::concatenate",
    "aten::stack", "aten::hstack", "aten::vstack", "aten::index_select", "aten::index", "aten::_unsafe_index",
    "aten::masked_select", "aten::gather", "aten::take", "aten::take_along_dim", "aten::scatter",
    "aten::masked_scatter", "aten::index_put", "aten::_unsafe_index_put", "aten::index_copy", "aten::where",
    "aten::masked_fill", "aten::index_fill", "aten::repeat", "aten::tile", "aten::repeat_interleave", "aten::flip",
    "aten::roll", "aten::pad", "aten::constant_pad_nd", "aten::slice_scatter", "aten::select_scatter",
    "aten::diagonal_scatter", "aten::narrow_copy", "aten::expand_copy", "aten::tril", "aten::triu"})
COPY_OPS_IN_PLACE = frozenset({"aten::copy_", "aten::index_put_", "aten::_index_put_impl_", "aten::scatter_",
                               "aten::masked_scatter_", "aten::index_copy_", "aten::put_"})
COPY_OPS = COPY_OPS_OUT | COPY_OPS_IN_PLACE


@dataclass
class StepCounts:
    """What one counted region did: network calls, ops, host reads and bytes copied outside them, and reads inside
    them."""

    forwards: int = 0
    ops: Counter = field(default_factory=Counter)  # aten op name -> count, outside forwards, those that launch no kernel left out
    reads: Counter = field(default_factory=Counter)  # read name -> count, outside forwards
    reads_inside: Counter = field(default_factory=Counter)  # the network's own reads (MoE routing counts, ...)
    copied: Counter = field(default_factory=Counter)  # copy-like op name -> bytes it wrote, outside forwards

    @property
    def op_count(self) -> int:
        return sum(self.ops.values())

    @property
    def read_count(self) -> int:
        return sum(self.reads.values())

    @property
    def copied_bytes(self) -> int:
        return sum(self.copied.values())

    def per_forward(self) -> tuple[float, float]:
        """(ops outside forwards, host reads outside forwards) per network call."""
        n = max(self.forwards, 1)
        return self.op_count / n, self.read_count / n


def _is_read(name: str, args: Sequence[Any]) -> bool:
    if name in READ_OPS:
        return True
    if name in INDEX_OPS and len(args) > 1 and isinstance(args[1], (list, tuple)):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
    return False


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _nbytes(tensor: torch.Tensor, elements: int | None = None) -> int:
    return (tensor.numel() if elements is None else elements) * tensor.element_size()


def _indexed_elements(target: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> int:
    """How many elements ``target[indices]`` holds (advanced indexing; a boolean index counts its true elements)."""
    shapes, rest, dim = [], 1, 0
    for index in indices:
        if index is None:  # a whole dimension kept
            rest *= target.shape[dim]
            dim += 1
        elif index.dtype == torch.bool:
            shapes.append((int(index.sum()),))
            dim += index.dim()
        else:
            shapes.append(tuple(index.shape))
            dim += 1
    for size in target.shape[dim:]:
        rest *= size
    return torch.Size(torch.broadcast_shapes(*shapes)).numel() * rest if shapes else rest


def _written_in_place(name: str, args: Sequence[Any]) -> int:
    """Bytes an in-place copy-like op wrote into ``args[0]`` (the module docstring's rule)."""
    target = args[0]
    if name == "aten::copy_":
        return _nbytes(target)
    if name in ("aten::index_put_", "aten::_index_put_impl_"):
        return _nbytes(target, _indexed_elements(target, args[1]))
    if name == "aten::scatter_":
        return _nbytes(target, args[2].numel())
    if name == "aten::masked_scatter_":
        return _nbytes(target, int(torch.broadcast_to(args[1], target.shape).sum()))
    source = args[3] if name == "aten::index_copy_" else args[2]  # index_copy_(dim, index, source), put_(index, source)
    return _nbytes(target, source.numel())


def bytes_written(name: str, args: Sequence[Any], out: Any) -> int:
    """Bytes a copy-like op (``COPY_OPS``) wrote; 0 for any other op, and for an output that is one of its inputs'
    storage (``to`` of a tensor already of that dtype and device, ``reshape`` of a contiguous one)."""
    if name in COPY_OPS_IN_PLACE:
        return _written_in_place(name, args)
    if name not in COPY_OPS_OUT:
        return 0
    inputs = {t.untyped_storage().data_ptr() for t in _tensors(args)}
    return sum(_nbytes(t) for t in _tensors(out) if t.untyped_storage().data_ptr() not in inputs)


class _Dispatch(TorchDispatchMode):
    def __init__(self, owner: "OpCounter") -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        counts = self.owner.counts
        if _is_read(name, args):
            (counts.reads_inside if self.owner.depth else counts.reads)[name] += 1
        if not self.owner.depth and name not in NO_KERNEL_OPS:
            counts.ops[name] += 1
        out = func(*args, **(kwargs or {}))
        written = bytes_written(name, args, out) if not self.owner.depth and name in COPY_OPS else 0
        if written:
            counts.copied[name] += written
        return out


class OpCounter:
    """Context manager counting one region; ``modules`` are the network's (their calls are the forwards).

    Python-level reads are counted by wrapping ``torch.Tensor``'s methods for the duration, so use one counter at a
    time and not across threads."""

    def __init__(self, modules: torch.nn.Module | Sequence[torch.nn.Module]) -> None:
        self.modules = (modules,) if isinstance(modules, torch.nn.Module) else tuple(modules)
        self.counts = StepCounts()
        self.depth = 0
        self._undo: list[Callable[[], None]] = []
        self._mode = _Dispatch(self)

    def _enter_forward(self, *_: Any) -> None:
        self.depth += 1

    def _leave_forward(self, *_: Any) -> None:
        self.depth -= 1
        if not self.depth:
            self.counts.forwards += 1

    def _wrap_read(self, name: str) -> None:
        original = getattr(torch.Tensor, name)

        def read(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            (self.counts.reads_inside if self.depth else self.counts.reads)[f"Tensor.{name}"] += 1
            return original(tensor, *args, **kwargs)

        setattr(torch.Tensor, name, read)
        self._undo.append(lambda: setattr(torch.Tensor, name, original))

    def __enter__(self) -> StepCounts:
        for module in self.modules:
            for handle in (module.register_forward_pre_hook(self._enter_forward),
                           module.register_forward_hook(self._leave_forward)):
                self._undo.append(handle.remove)
        for name in PYTHON_READS:
            self._wrap_read(name)
        self._mode.__enter__()
        return self.counts

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        for undo in reversed(self._undo):
            undo()
        self._undo = []
