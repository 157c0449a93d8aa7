"""Exact counts of what a decode step costs a GPU beyond the network: ops launched outside forwards and host reads.

On a GPU every aten op outside the network's forward is (at least) a kernel launch, and every read of a device value
by the host (``.item()``, ``.tolist()``, ``nonzero``, boolean indexing, a Python ``if`` on a tensor) waits for the
queue to drain. Both are counted here on any device, so they can be compared across batch sizes on a CPU box:

* ops: a ``TorchDispatchMode`` sees every aten op; those dispatched while a network module is running (its forward
  hooks bracket the call) are the forward's and are counted apart.
* host reads: the ops whose result the host must wait for (``_local_scalar_dense`` is what ``item``, ``bool``,
  ``int`` and ``float`` of a tensor reduce to; ``nonzero`` and the ops built on it; ``equal``; indexing with a boolean
  mask), plus the Python-level reads that dispatch nothing on a CPU tensor (``tolist``, ``numpy``, ``cpu``).
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


@dataclass
class StepCounts:
    """What one counted region did: network calls, ops and host reads outside them, and reads inside them."""

    forwards: int = 0
    ops: Counter = field(default_factory=Counter)  # aten op name -> count, outside forwards, those that launch no kernel left out
    reads: Counter = field(default_factory=Counter)  # read name -> count, outside forwards
    reads_inside: Counter = field(default_factory=Counter)  # the network's own reads (MoE routing counts, ...)

    @property
    def op_count(self) -> int:
        return sum(self.ops.values())

    @property
    def read_count(self) -> int:
        return sum(self.reads.values())

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
        return func(*args, **(kwargs or {}))


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
