"""Where a model's files come from (hub id, local folder or tiny recipe) and what identifies them."""

from __future__ import annotations

import hashlib
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from harness.errors import UserError
from models.networks.lora_folder import LoraFiles, check_base, read_lora_folder
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
    adapter: LoraFiles | None = None  # a PEFT LoRA merged into the weights at load (its hash is in the identity)


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


def resolve_source(ref: str, revision: str | None = None, adapter: str | None = None) -> ModelSource:
    """Where the checkpoint ``ref`` is and what identifies it; with ``adapter``, a LoRA folder checked (files,
    config, trained on this checkpoint) and hashed here, before any weights load."""
    source = _checkpoint_source(ref, revision)
    if adapter is None:
        return source
    files = read_lora_folder(adapter)
    check_base(files, (source.ref, source.path), source.ref)
    return replace(source, adapter=files)


def _checkpoint_source(ref: str, revision: str | None) -> ModelSource:
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


SERVED_PREFIX = "openai:"  # --models openai:<base url>[#<served model>]


def split_served(ref: str) -> tuple[str, str | None]:
    """``<base url>[#<served model>]`` -> (the base URL without a trailing slash, the served model or None)."""
    base, _, model = ref.partition("#")
    return base.rstrip("/"), model.strip() or None


def served_source(ref: str) -> ModelSource:
    """A model behind an OpenAI-compatible server. Its identity is the address and the model asked for: the weights
    are the server's, so another server (or another model behind it) gets sample keys of its own."""
    base, model = split_served(ref)
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ModelLoadError(f"{SERVED_PREFIX}{ref} is not a server address; give {SERVED_PREFIX}http://HOST:PORT/v1 "
                             f"(and #MODEL for a server that serves several)")
    return ModelSource(ref, base, None, f"served:{base}#{model or '*'}")


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
