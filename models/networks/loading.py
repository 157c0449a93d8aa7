"""Build, load and save the native networks: config.json + safetensors (one file or shards with an index) from a
local folder or a hub id, matched strictly by parameter name and shape.

The network is built on the meta device and the checkpoint tensors are assigned in place (``assign=True``), so an
8B model is allocated once, directly in the requested dtype and device.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from harness.errors import UserError
from models.families import NETWORK_KINDS
from models.family import NetworkKind
from models.networks.common import RMSNorm
from models.networks.dream import DreamNetwork, DreamNetworkConfig
from models.networks.llada import LLaDANetwork, LLaDANetworkConfig
from models.networks.llada2 import LLaDA2Network, LLaDA2NetworkConfig
from models.networks.lora import apply_merge, plan_for
from models.networks.lora_folder import LoraFiles
from models.networks.qwen3 import Qwen3Network, Qwen3NetworkConfig

Kind = str  # a key of NETWORK_KINDS, which the families declare (models/families/)
Network = LLaDANetwork | DreamNetwork | Qwen3Network | LLaDA2Network
Config = LLaDANetworkConfig | DreamNetworkConfig | Qwen3NetworkConfig | LLaDA2NetworkConfig
_DTYPES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}
_SHOW = 5  # names listed per category in a CheckpointError before "(+N more)"


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be loaded into the network; the message is one line naming the offending tensors."""


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"unsupported dtype {dtype}; use bfloat16, float16 or float32")
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def _kind(kind: str) -> NetworkKind:
    if kind not in NETWORK_KINDS:
        raise ValueError(f"unknown network kind {kind!r}; use {', '.join(map(repr, NETWORK_KINDS))}")
    return NETWORK_KINDS[kind]


def kind_of(network: nn.Module) -> Kind:
    """Among the kinds of the network's class, the one its config's model_type names (else the first: a Qwen3 network
    of a checkpoint that names no known model_type is ``qwen3``)."""
    matches = [kind for kind, spec in NETWORK_KINDS.items() if isinstance(network, spec.network)]
    if not matches:
        raise ValueError(f"not a native network: {type(network).__name__}")
    model_type = str(network.config.model_type).lower()
    named = (kind for kind in matches if model_type in NETWORK_KINDS[kind].model_types)
    return next(named, matches[0])


# ---- building -----------------------------------------------------------------------------------------------------


def build_network(config: Config, device: torch.device | str = "cpu", dtype: torch.dtype | str = torch.float32,
                  seed: int | None = None) -> Network:
    """A network with fresh weights; with ``seed``, deterministic weights that make every parameter matter (norm
    weights 1 + 0.1 N, biases 0.1 N, linears N(0, 1/fan_in), embeddings N(0, 1)): for tiny offline models."""
    cls = next(spec.network for spec in NETWORK_KINDS.values() if isinstance(config, spec.config))
    with torch.device(device):
        network = cls(config)
    network = network.to(resolve_dtype(dtype))
    if seed is not None:
        init_random_(network, seed)
    return network.requires_grad_(False).eval()


@torch.no_grad()
def init_random_(network: nn.Module, seed: int) -> nn.Module:
    """Overwrite every parameter from a CPU generator seeded with ``seed`` (same values on any device)."""
    gen = torch.Generator().manual_seed(seed)

    def fill(p: torch.Tensor, values: torch.Tensor) -> None:
        p.copy_(values.to(device=p.device, dtype=p.dtype))

    for module in network.modules():
        if isinstance(module, RMSNorm):
            fill(module.weight, 1 + 0.1 * torch.randn(module.weight.shape, generator=gen))
        elif isinstance(module, nn.Embedding):
            fill(module.weight, torch.randn(module.weight.shape, generator=gen))
        elif isinstance(module, nn.Linear):
            fill(module.weight, torch.randn(module.weight.shape, generator=gen) * module.in_features ** -0.5)
            if module.bias is not None:
                fill(module.bias, 0.1 * torch.randn(module.bias.shape, generator=gen))
    return network


# ---- reading a checkpoint -----------------------------------------------------------------------------------------


def resolve_folder(path_or_id: str | Path, revision: str | None = None) -> Path:
    """A local folder as is; anything else of the form owner/name is fetched with ``snapshot_download``."""
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    text = str(path_or_id)
    if path.exists() or text.startswith((".", "/", "~")) or text.count("/") != 1:
        raise CheckpointError(f"no checkpoint folder at {text}")
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            repo_id=text, revision=revision,
            allow_patterns=["config.json", "*.safetensors", "*.safetensors.index.json"],
        )
    except Exception as e:  # offline, unknown repo, no access: one line either way
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"cannot fetch {text} from the hub ({type(e).__name__}: {reason})") from e
    return Path(folder)


def read_config(folder: Path, kind: Kind) -> Config:
    spec = _kind(kind)
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"checkpoint at {folder} has no config.json")
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"config.json at {folder} is not valid JSON: {e}") from e
    model_type = d.get("model_type")
    if model_type is not None and str(model_type).lower() not in spec.model_types:
        raise CheckpointError(f"checkpoint at {folder} is model_type {model_type!r}, not {spec.label}")
    return spec.config.from_dict(d)


def checkpoint_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it, from ``model.safetensors.index.json`` when present, else
    from the headers of every ``*.safetensors`` in the folder."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = {name: folder / file for name, file in weight_map.items()}
        absent = sorted({str(p.name) for p in files.values() if not p.is_file()})
        if absent:
            raise CheckpointError(f"checkpoint at {folder} lacks shard files named in its index: {', '.join(absent)}")
        return files
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise CheckpointError(f"checkpoint at {folder} has no *.safetensors file")
    files: dict[str, Path] = {}
    for shard in shards:
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                if name in files:
                    raise CheckpointError(f"checkpoint at {folder} stores {name} twice ({files[name].name}, {shard.name})")
                files[name] = shard
    return files


def checkpoint_shapes(files: dict[str, Path]) -> dict[str, list[int]]:
    """Shapes read from the safetensors headers only (no tensor data is loaded)."""
    shapes: dict[str, list[int]] = {}
    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        with safe_open(str(path), framework="pt") as f:
            stored = set(f.keys())
            for name in names:
                if name not in stored:
                    raise CheckpointError(f"index names {name} in {path.name} but that file does not store it")
                shapes[name] = list(f.get_slice(name).get_shape())
    return shapes


def check_match(expected: dict[str, list[int]], found: dict[str, list[int]], where: str, label: str) -> None:
    """Raise one CheckpointError line naming missing, unexpected and mis-shaped tensors; return if all match."""

    def listed(names: list[str]) -> str:
        more = f" (+{len(names) - _SHOW} more)" if len(names) > _SHOW else ""
        return ", ".join(names[:_SHOW]) + more

    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    misshaped = sorted(n for n in set(expected) & set(found) if list(expected[n]) != list(found[n]))
    parts = []
    if missing:
        parts.append(f"missing {listed(missing)}")
    if unexpected:
        parts.append(f"unexpected {listed(unexpected)}")
    if misshaped:
        parts.append("mis-shaped " + listed([f"{n} {found[n]} vs expected {list(expected[n])}" for n in misshaped]))
    if parts:
        raise CheckpointError(f"checkpoint at {where} does not match {label}: {'; '.join(parts)}")


def expected_shapes(network: nn.Module) -> dict[str, list[int]]:
    return {name: list(t.shape) for name, t in network.state_dict().items()}


# ---- public entry points ------------------------------------------------------------------------------------------


def load_network(path_or_id: str | Path, kind: Kind, dtype: torch.dtype | str = torch.bfloat16,
                 device: torch.device | str = "cpu", revision: str | None = None,
                 adapter: LoraFiles | None = None) -> Network:
    """Load a released (or ``save_network``-written) checkpoint into the native network, in eval mode without
    gradients, with ``adapter`` (a PEFT LoRA, models/networks/lora.py) merged into its weights. Names and shapes,
    the adapter's included, are checked against the network before any tensor data is read."""
    spec = _kind(kind)
    dtype = resolve_dtype(dtype)
    device = torch.device(device)
    folder = resolve_folder(path_or_id, revision)
    config = read_config(folder, kind)
    with torch.device("meta"):
        network = spec.network(config)
    files = checkpoint_files(folder)
    check_match(expected_shapes(network), checkpoint_shapes(files), str(path_or_id), spec.label)
    # The checkpoint's names are the network's state dict's, and PEFT's are the same modules' (lora.py): one table.
    merge = None if adapter is None else plan_for(adapter, network, f"the {spec.label} network")
    state: dict[str, torch.Tensor] = {}
    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        with safe_open(str(path), framework="pt") as f:
            for name in names:
                tensor = f.get_tensor(name)
                if not tensor.is_floating_point():
                    raise CheckpointError(f"checkpoint at {path_or_id} stores {name} as {tensor.dtype}, not a float")
                state[name] = tensor.to(device=device, dtype=dtype)
    network.load_state_dict(state, strict=True, assign=True)
    if merge is not None:
        apply_merge(merge, network.state_dict(keep_vars=True))
    return network.requires_grad_(False).eval()


def save_network(network: nn.Module, folder: str | Path) -> Path:
    """Write config.json and model.safetensors (one file) that ``load_network`` reads back."""
    kind_of(network)  # refuses anything but the native networks
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = network.config.to_dict()
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    state = {name: t.detach().contiguous().cpu() for name, t in network.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
