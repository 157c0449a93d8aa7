"""A native network whose decode step runs compiled: ``torch.compile(fullgraph=True)``, one graph per call shape and
no host read inside, so a CUDA graph can capture a step.

A call that keeps a ``KVBuffer`` (Qwen3's ``forward``, every ``block_forward``) has a host half, ``{call}_call``,
that checks the inputs and claims the cache's columns on Python ints, and a device half, ``{call}_step``, of tensor
work only. The host half runs eagerly, with the static reservation (by index, over every column:
``KVBuffer.reserve``), and the device half is compiled, so its code and shapes do not follow the row lengths: the
steps of a decode share one graph. Any other call (LLaDA's and Dream's forward, with or without a ``KVBuffer`` and
the reservation its caller took, as Fast-dLLM's cache modes make it) is compiled whole. Where an eager forward reads
a value back, ``torch.compiler.is_compiling()`` picks a form that does not: the padding mask kept even when every
key is real, LLaDA's RoPE at explicit positions computed instead of gathered from a table sized on the host, the
LLaDA2 experts computed densely.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

BACKEND = "inductor"  # torch.compile's backend; tests use dynamo's graphs op by op ("eager")
# Graphs per compiled method. Shapes that change between decodes (batch, prompt, capacity) and the networks that
# share a method's code (every ``block_forward_step``) each add a few; with fullgraph, reaching torch's default of
# 8 fails the call instead of falling back to eager.
RECOMPILE_LIMIT = 64


class CompiledNetwork(nn.Module):
    """``network`` with its per-step calls compiled, each on first use; ``new_cache`` is its own. A module, so the
    forward timer's hooks see one call per step."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network
        self._compiled: dict[str, Callable[..., Any]] = {}

    def compiled(self, name: str) -> Callable[..., Any]:
        """The network's method ``name``, compiled."""
        if name not in self._compiled:
            method = torch.compile(getattr(self.network, name), fullgraph=True, backend=BACKEND)
            self._compiled[name] = torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT)(method)
        return self._compiled[name]

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        """The network's call ``name``: its host half eagerly and its device half compiled, or all of it compiled."""
        host = getattr(self.network, f"{name}_call", None)
        if host is None:
            return self.compiled(name)(*args, **kwargs)
        with host(*args, static=True, **kwargs) as step:
            return self.compiled(f"{name}_step")(*step)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.call("forward", args, kwargs)

    def block_forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.call("block_forward", args, kwargs)

    def causal_forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.call("causal_forward", args, kwargs)

    def new_cache(self, batch: int, capacity: int) -> Any:
        return self.network.new_cache(batch, capacity)

    @property
    def reads_cells(self) -> bool:
        """Whether ``forward(read=)`` runs the LM head at given cells: the network's answer, compiled or not."""
        return bool(getattr(self.network, "reads_cells", False))
