"""Where a model's files come from (hub id, local folder or tiny recipe) and what identifies them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.errors import UserError
from models.real_tokenizer import TokenizerFetchError
from models.tiny import TINY_MODELS, materialize


class ModelLoadError(UserError, ValueError):
    """A model that cannot be found or loaded; the message is one line for the user."""


@dataclass(frozen=True)
class ModelSource:
    ref: str  # what the user or the registry named: a hub id, a local path or a tiny recipe
    path: str  # what from_pretrained receives
    revision: str | None  # hub revision, if one was asked for
    fingerprint: str  # content hash of a local folder, or "hub:<id>@<revision>"


def _looks_local(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~")) or Path(ref).expanduser().exists()


def folder_fingerprint(folder: Path) -> str:
    """Hash of config.json plus the names and sizes of the weight files: cheap, and changes when the model does."""
    digest = hashlib.sha256()
    for item in sorted(folder.iterdir()):
        if item.name == "config.json":
            digest.update(item.read_bytes())
        elif item.suffix in {".safetensors", ".bin"}:
            digest.update(f"{item.name}:{item.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def resolve_source(ref: str, revision: str | None = None) -> ModelSource:
    if ref in TINY_MODELS:
        try:
            folder = materialize(ref)
        except TokenizerFetchError as error:
            raise ModelLoadError(f"{ref}: {error}") from None
        return ModelSource(ref, str(folder), None, f"tiny:{folder.name}:{folder_fingerprint(folder)}")
    if _looks_local(ref):
        folder = Path(ref).expanduser()
        if not folder.is_dir():
            raise ModelLoadError(f"model path {ref} does not exist (give a folder with config.json, or a hub id)")
        if not (folder / "config.json").exists():
            raise ModelLoadError(f"model folder {ref} has no config.json (is it a Hugging Face checkpoint folder?)")
        return ModelSource(ref, str(folder.resolve()), None, f"local:{folder_fingerprint(folder)}")
    return ModelSource(ref, ref, revision, f"hub:{ref}@{revision or 'main'}")


def hub_error(ref: str, error: Exception) -> ModelLoadError:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ModelLoadError(
        f"cannot load {ref}: {first[:200]} (offline? set HF_HOME to a cache that holds it, log in for gated "
        f"models, or pass a local folder)"
    )


def parse_dtype(name: str, device: torch.device) -> torch.dtype:
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in table:
        raise ModelLoadError(f"unknown dtype {name}; use one of auto, {', '.join(table)}")
    return table[name]
