"""A PEFT LoRA folder (``adapter_config.json`` + ``adapter_model.safetensors``) as the harness checks and identifies
it before any model loads: the files, the part of the config that decides the merge, the content hash that keys its
samples (so a moved folder keeps them), and whether it was trained on the model it is given to.

The merge itself is ``models.networks.lora``; this module reads no tensor data.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.errors import UserError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# LoRA variants whose merge is not W + scale * B @ A, or whose saved tensors follow other rules: refused by name.
VARIANTS = ("use_dora", "lora_bias", "target_parameters", "layer_replication", "trainable_token_indices",
            "alora_invocation_tokens", "use_qalora", "velora_config", "monteclora_config", "use_bdlora",
            "arrow_config", "kasa_config", "megatron_config")
# Initialisations that move the base weights: such an adapter is a delta from the moved weights, not the release's.
BASE_MOVING_INITS = ("pissa", "corda", "olora", "lora_ga", "loftq")
_CHUNK = 1 << 24


class AdapterError(UserError, ValueError):
    """A LoRA adapter that cannot be merged into the model it is given to; the message is one line for the user."""


@dataclass(frozen=True)
class LoraConfig:
    """What in adapter_config.json decides the merge: each module's rank and scale, and how its delta is laid out."""

    r: int = 8
    lora_alpha: float = 8.0
    use_rslora: bool = False
    fan_in_fan_out: bool = False
    rank_pattern: tuple[tuple[str, int], ...] = ()  # (pattern, rank) in the file's order, as PEFT matches them
    alpha_pattern: tuple[tuple[str, float], ...] = ()
    base_model: str | None = None  # base_model_name_or_path
    modules_to_save: tuple[str, ...] = ()  # modules trained whole: PEFT keeps them as copies apart from the model

    def saved_whole(self, module: str) -> bool:
        """Whether ``module`` is one of ``modules_to_save`` (by the end of its name, as PEFT matches them)."""
        return any(module == m or module.endswith("." + m) for m in self.modules_to_save)

    def rank(self, module: str) -> int:
        return pattern_value(self.rank_pattern, module, self.r)

    def scale(self, module: str) -> float:
        """lora_alpha / r, or lora_alpha / sqrt(r) rank-stabilised, with the module's own r and alpha if a pattern
        names it."""
        r, alpha = self.rank(module), pattern_value(self.alpha_pattern, module, self.lora_alpha)
        return alpha / (math.sqrt(r) if self.use_rslora else r)


@dataclass(frozen=True)
class LoraFiles:
    """A checked adapter folder and the hash of its two files (what a sample key holds instead of the path)."""

    folder: str  # resolved
    sha256: str
    config: LoraConfig

    @property
    def short(self) -> str:
        return self.sha256[:8]


def pattern_value(patterns: Sequence[tuple[str, Any]], module: str, default: Any) -> Any:
    """PEFT's rank/alpha pattern lookup (``get_pattern_key``): the first pattern that matches the end of the module's
    name at a dot boundary, else the default."""
    for pattern, value in patterns:
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


def adapter_digest(parts: Sequence[tuple[str, Any]]) -> str:
    """sha256 over (name, content) pairs, each prefixed by its name and size; content is bytes or a file path."""
    digest = hashlib.sha256()
    for name, content in parts:
        if isinstance(content, Path):
            digest.update(f"{name}:{content.stat().st_size}\n".encode())
            with content.open("rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
        else:
            digest.update(f"{name}:{len(content)}\n".encode())
            digest.update(content)
    return digest.hexdigest()


def parse_config(text: bytes, where: str) -> LoraConfig:
    """The merge's part of adapter_config.json; any other PEFT type or a LoRA variant is one line."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise AdapterError(f"{ADAPTER_CONFIG} at {where} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise AdapterError(f"{ADAPTER_CONFIG} at {where} is not a JSON object")
    kind = str(data.get("peft_type", "")).upper()
    if kind != "LORA":
        raise AdapterError(f"adapter at {where} is PEFT type {data.get('peft_type')!r}; only LORA adapters are merged")
    used = [name for name in VARIANTS if data.get(name)]
    if used:
        raise AdapterError(f"adapter at {where} uses {', '.join(used)}, which this harness does not merge (plain LoRA "
                           f"only: merge it with peft's merge_and_unload and pass the merged checkpoint instead)")
    init = str(data.get("init_lora_weights", True)).lower()
    if init.startswith(BASE_MOVING_INITS):
        raise AdapterError(f"adapter at {where} was initialised with {init}, which moves the base weights; save it "
                           f"with peft's path_initial_model_for_weight_conversion to get a plain LoRA")
    try:
        config = LoraConfig(
            r=int(data.get("r", 8)), lora_alpha=float(data.get("lora_alpha", 8)),
            use_rslora=bool(data.get("use_rslora", False)), fan_in_fan_out=bool(data.get("fan_in_fan_out", False)),
            rank_pattern=tuple((str(k), int(v)) for k, v in (data.get("rank_pattern") or {}).items()),
            alpha_pattern=tuple((str(k), float(v)) for k, v in (data.get("alpha_pattern") or {}).items()),
            base_model=data.get("base_model_name_or_path") or None,
            modules_to_save=tuple(str(m) for m in data.get("modules_to_save") or ()),
        )
    except (TypeError, ValueError, AttributeError) as error:
        raise AdapterError(f"{ADAPTER_CONFIG} at {where} has a bad r, lora_alpha or pattern: {error}") from None
    if config.r < 1 or any(r < 1 for _, r in config.rank_pattern):
        raise AdapterError(f"{ADAPTER_CONFIG} at {where} has a rank below 1")
    for pattern, _ in (*config.rank_pattern, *config.alpha_pattern):
        try:
            re.compile(pattern)
        except re.error as error:
            raise AdapterError(f"{ADAPTER_CONFIG} at {where}: pattern {pattern!r} is not a regular expression "
                               f"({error})") from None
    return config


def read_lora_folder(path: str | Path) -> LoraFiles:
    """Check a PEFT LoRA folder and hash its files (no tensor is read)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise AdapterError(f"adapter {path} is not a folder (give the folder PEFT's save_pretrained wrote, with "
                           f"{ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})")
    missing = [name for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS) if not (folder / name).is_file()]
    if missing:
        hint = (" (adapter_model.bin is the old format: load it with peft and save it again, which writes "
                "safetensors)" if (folder / "adapter_model.bin").is_file() else "")
        raise AdapterError(f"{path} is not a PEFT adapter folder: it has no {' or '.join(missing)}{hint}")
    folder = folder.resolve()
    config = parse_config((folder / ADAPTER_CONFIG).read_bytes(), str(path))
    digest = adapter_digest([(ADAPTER_CONFIG, folder / ADAPTER_CONFIG), (ADAPTER_WEIGHTS, folder / ADAPTER_WEIGHTS)])
    return LoraFiles(str(folder), digest, config)


def read_lora_bytes(files: LoraFiles) -> bytes:
    """The adapter's weights file, read once and checked against the hash the run was planned (and keyed) with."""
    folder = Path(files.folder)
    try:
        config, weights = (folder / ADAPTER_CONFIG).read_bytes(), (folder / ADAPTER_WEIGHTS).read_bytes()
    except OSError as error:
        raise AdapterError(f"cannot read the adapter at {files.folder}: {error}") from None
    if adapter_digest([(ADAPTER_CONFIG, config), (ADAPTER_WEIGHTS, weights)]) != files.sha256:
        raise AdapterError(f"the adapter at {files.folder} changed since the run was planned; run again")
    return weights


# ---- was it trained on this model? ----------------------------------------------------------------------------------


def hub_id(name: str) -> str | None:
    """``owner/name`` (lower-cased) of a hub id or of a hub cache folder (``…/models--owner--name/snapshots/…``);
    None for a plain local path or a bare name."""
    for part in Path(name).parts:
        if part.startswith("models--"):
            pieces = part[len("models--"):].split("--")
            if len(pieces) == 2:
                return "/".join(pieces).lower()
    text = name.strip()
    if text.count("/") == 1 and not text.startswith((".", "/", "~")) and not Path(text).expanduser().exists():
        return text.lower()
    return None


def model_name(name: str) -> str:
    """The last part of a name: a hub id's repository name, else the folder's name (lower-cased)."""
    found = hub_id(name)
    return (found.rsplit("/", 1)[-1] if found else Path(name.strip().rstrip("/")).name).lower()


def same_base(a: str, b: str) -> bool:
    """Two hub ids must be the same; when either side is a local path, only the names count (the checkpoint's
    folder name against the other's repository or folder name), so a local copy of a hub checkpoint matches."""
    hub_a, hub_b = hub_id(a), hub_id(b)
    if hub_a and hub_b:
        return hub_a == hub_b
    return model_name(a) == model_name(b)


def check_base(files: LoraFiles, names: Sequence[str], shown: str) -> None:
    """Refuse an adapter whose base_model_name_or_path names another model than any of ``names`` (the checkpoint's
    ref and path); an adapter that names none is taken as given."""
    base = files.config.base_model
    if not base or any(same_base(base, name) for name in names if name):
        return
    raise AdapterError(f"adapter at {files.folder} was trained on {base} (its base_model_name_or_path), not on "
                       f"{shown}; give it the model it was trained on (if it was trained on this one, set "
                       f"base_model_name_or_path in its {ADAPTER_CONFIG} to {shown!r} or null)")
