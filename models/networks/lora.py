"""A PEFT LoRA adapter merged into a network's weights at load: ``W + scale * B @ A`` per targeted module.

PEFT names a tensor after the module it adapts in the transformers model (``base_model.model.<module>.lora_A.weight``).
The native networks keep the released checkpoints' parameter names (``models.networks.loading`` loads them by those
names, strictly), which are the transformers modules' names, so ``<module>.weight`` is the parameter to merge into on
either implementation: the name table is the network's own state dict (``loading.expected_shapes``), nothing kept
beside it. Every name, rank and shape is checked before any weight changes; a mismatch is one line.

Besides the LoRA pairs an adapter may store whole tensors (``modules_to_save``, embeddings PEFT saved, trained
biases): they replace the network's tensor of that name, before the deltas are added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import Tensor, nn

from models.networks.lora_folder import ADAPTER_WEIGHTS, AdapterError, LoraConfig, LoraFiles, read_lora_bytes

PREFIX = "base_model.model."
# suffix -> (which factor, whether the delta is (B @ A) transposed): Linear layers, then Embedding layers.
FACTORS = {"lora_A.weight": ("A", False), "lora_B.weight": ("B", False),
           "lora_embedding_A": ("A", True), "lora_embedding_B": ("B", True)}
_SHOW = 5


@dataclass(frozen=True)
class LoraUpdate:
    """One targeted module: its factors and scale, and the parameter its delta is added to."""

    module: str
    target: str
    a: Tensor  # [r, in]
    b: Tensor  # [out, r]
    scale: float
    transposed: bool  # the delta is (B @ A).T: an Embedding's layout, or a Conv1D's (fan_in_fan_out)

    def shape(self) -> list[int]:
        rows, columns = self.b.shape[0], self.a.shape[1]
        return [columns, rows] if self.transposed else [rows, columns]

    def delta(self, device: torch.device) -> Tensor:
        """scale * B @ A in float32 on ``device``, laid out as the parameter."""
        b, a = (t.to(device=device, dtype=torch.float32) for t in (self.b, self.a))
        delta = (b @ a) * self.scale
        return delta.T if self.transposed else delta


@dataclass(frozen=True)
class MergePlan:
    """What an adapter changes in a network, checked against the network's names and shapes."""

    updates: tuple[LoraUpdate, ...]
    replaced: tuple[tuple[str, Tensor], ...]  # whole tensors the adapter stores, by the network's parameter name


def listed(items: list[str]) -> str:
    more = f" (+{len(items) - _SHOW} more)" if len(items) > _SHOW else ""
    return ", ".join(items[:_SHOW]) + more


def split_name(key: str) -> tuple[str, str | None]:
    """(the module or parameter name in the network, the LoRA factor suffix or None for a whole tensor)."""
    name = key[len(PREFIX):]
    for suffix in FACTORS:
        if name.endswith("." + suffix):
            return name[:-len(suffix) - 1], suffix
    return name.replace(".base_layer.", "."), None


def plan_merge(tensors: Mapping[str, Tensor], config: LoraConfig, shapes: Mapping[str, list[int]], where: str,
               label: str, tied: frozenset[str] = frozenset()) -> MergePlan:
    """Pair each module's factors, take its rank and scale from the config (rank_pattern and alpha_pattern as PEFT
    reads them) and check them, its target's name and the delta's shape against ``shapes`` (the network's
    parameter name -> shape). Raises one AdapterError line for whatever does not match. A module saved whole
    (``modules_to_save``) whose weight the network ties to another (``tied``) is refused: PEFT trained a copy apart,
    and replacing the tied weight would change both. (A LoRA delta on a tied weight changes both in PEFT's merge
    too.)"""
    foreign = sorted(k for k in tensors if not k.startswith(PREFIX))
    if foreign:
        raise AdapterError(f"{ADAPTER_WEIGHTS} at {where} holds tensors that are not PEFT's ({listed(foreign)}; "
                           f"PEFT's start with {PREFIX})")
    factors: dict[str, dict[str, tuple[Tensor, bool]]] = {}
    whole: dict[str, Tensor] = {}
    unknown = []
    for key, tensor in tensors.items():
        name, suffix = split_name(key)
        if suffix is not None:
            which, transposed = FACTORS[suffix]
            factors.setdefault(name, {})[which] = (tensor, transposed)
        elif "lora_" in name:
            unknown.append(key)
        else:
            whole[name] = tensor
    if unknown:
        raise AdapterError(f"{ADAPTER_WEIGHTS} at {where} holds LoRA tensors this harness does not merge: "
                           f"{listed(sorted(unknown))}")
    if not factors and not whole:
        raise AdapterError(f"{ADAPTER_WEIGHTS} at {where} holds no LoRA tensors")
    unpaired = sorted(m for m, f in factors.items() if set(f) != {"A", "B"})
    if unpaired:
        raise AdapterError(f"adapter at {where} has lora_A without lora_B or the reverse for {listed(unpaired)}")
    updates = tuple(LoraUpdate(module, f"{module}.weight", f["A"][0], f["B"][0], config.scale(module),
                               f["A"][1] or config.fan_in_fan_out)
                    for module, f in sorted(factors.items()))
    absent = sorted({u.module for u in updates if u.target not in shapes} | {n for n in whole if n not in shapes})
    if absent:
        raise AdapterError(f"adapter at {where} targets modules that match no parameter of {label}: {listed(absent)} "
                           f"(is it an adapter of another model?)")
    wrong = [f"{u.module} rank {u.a.shape[0]} (lora_A) / {u.b.shape[-1]} (lora_B) vs r={config.rank(u.module)} "
             f"in its config"
             for u in updates
             if u.a.dim() != 2 or u.b.dim() != 2 or not u.a.shape[0] == u.b.shape[1] == config.rank(u.module)]
    wrong += [f"{u.module} gives {u.shape()} vs {list(shapes[u.target])}" for u in updates
              if u.a.dim() == 2 and u.b.dim() == 2 and u.shape() != list(shapes[u.target])]
    wrong += [f"{n} {list(t.shape)} vs {list(shapes[n])}" for n, t in sorted(whole.items())
              if list(t.shape) != list(shapes[n])]
    if wrong:
        raise AdapterError(f"adapter at {where} does not fit {label}: mis-shaped {listed(wrong)}")
    copies = sorted(n for n in whole if n in tied and config.saved_whole(n.rpartition(".")[0]))
    if copies:
        raise AdapterError(f"adapter at {where} trained {listed(copies)} whole (modules_to_save), but {label} ties "
                           f"that weight to another; load the model untied (tie_word_embeddings false) or merge the "
                           f"adapter with peft's merge_and_unload")
    return MergePlan(updates, tuple(sorted(whole.items())))


@torch.no_grad()
def apply_merge(plan: MergePlan, state: Mapping[str, Tensor]) -> None:
    """Merge in place into ``state`` (a network's ``state_dict(keep_vars=True)``): the whole tensors first, then each
    delta added in float32 and rounded once to the parameter's dtype."""
    for name, tensor in plan.replaced:
        state[name].data.copy_(tensor.to(device=state[name].device, dtype=state[name].dtype))
    for update in plan.updates:
        weight = state[update.target]
        weight.data.copy_((weight.data.float() + update.delta(weight.device)).to(weight.dtype))


def read_lora_tensors(files: LoraFiles) -> dict[str, Tensor]:
    """The adapter's tensors (on the CPU), from the file the run was keyed by."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        return load(read_lora_bytes(files))
    except SafetensorError as error:
        raise AdapterError(f"{ADAPTER_WEIGHTS} at {files.folder} is not a safetensors file: {error}") from None


def tied_names(network: nn.Module) -> frozenset[str]:
    """The weights a network uses in two places: a tensor under several names (transformers' tied head), and the
    input embeddings of a network whose config ties them to the head (a native network has no head tensor then)."""
    by_tensor: dict[int, list[str]] = {}
    for name, tensor in network.state_dict(keep_vars=True).items():
        by_tensor.setdefault(id(tensor), []).append(name)
    tied = {name for names in by_tensor.values() if len(names) > 1 for name in names}
    config = getattr(network, "config", None)
    if getattr(config, "tie_word_embeddings", False) or getattr(config, "weight_tying", False):
        tied |= {f"{name}.weight" for name, module in network.named_modules() if isinstance(module, nn.Embedding)}
    return frozenset(tied)


def plan_for(files: LoraFiles, network: nn.Module, label: str) -> MergePlan:
    """The adapter's merge into ``network`` (built on any device, meta included), checked before anything changes."""
    shapes = {name: list(t.shape) for name, t in network.state_dict(keep_vars=True).items()}
    return plan_merge(read_lora_tensors(files), files.config, shapes, files.folder, label, tied_names(network))


def merge_adapter(network: nn.Module, files: LoraFiles, label: str | None = None) -> nn.Module:
    """``network`` with the adapter merged into its weights (in place): for a network already loaded, such as a
    transformers model, whose names are its modules' (those PEFT trained on)."""
    plan = plan_for(files, network, label or type(network).__name__)
    apply_merge(plan, network.state_dict(keep_vars=True))
    return network
