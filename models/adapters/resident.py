"""Loaded weights as something a run can hand on and let go: one model resident at a time.

An adapter's tokenizer and network load lazily into cached properties. A run that goes model by model releases them
after the model's jobs, and two entries on the same checkpoint and dtype (``llada`` and ``llada-fastdllm``) share
one loaded network: the second adopts what the first loaded instead of loading it again.
"""

from __future__ import annotations

import gc
from typing import Any

import torch


class ResidentWeights:
    """Mixin for adapters whose loaded state lives in cached properties named by ``loaded_fields``."""

    loaded_fields: tuple[str, ...]
    loader: str  # how the weights are built ("causal", or a native network kind): part of what may be shared
    source: Any
    dtype: torch.dtype
    device: torch.device
    merges_lora = True  # its loaders merge the source's LoRA adapter (models.registry.load_adapter checks this)

    def share_key(self) -> tuple[str, str, str, str, str]:
        """Adapters with equal keys hold the same network: same loader, checkpoint content, LoRA, dtype and
        device."""
        adapter = getattr(self.source, "adapter", None)
        lora = "" if adapter is None else adapter.sha256
        return self.loader, self.source.fingerprint, lora, str(self.dtype), str(self.device)

    def is_loaded(self) -> bool:
        return any(name in self.__dict__ for name in self.loaded_fields)

    def adopt(self, other: "ResidentWeights") -> None:
        """Take ``other``'s loaded tokenizer and network (same share key), so nothing loads twice."""
        if other.share_key() != self.share_key():
            raise ValueError(f"cannot share weights between {other.share_key()} and {self.share_key()}")
        for name in self.loaded_fields:
            if name in other.__dict__:
                self.__dict__[name] = other.__dict__[name]

    def release(self) -> None:
        """Drop this adapter's references to its weights; they load again on the next decode."""
        for name in self.loaded_fields:
            self.__dict__.pop(name, None)


def free_accelerator(device: torch.device) -> None:
    """Collect dropped networks now and hand their cached blocks back to the device."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def hand_over(previous: Any, following: Any | None) -> bool:
    """After ``previous``'s jobs: pass its weights to ``following`` when they share a checkpoint, then release
    ``previous`` (and free the accelerator when nothing was passed on). True when the weights were shared."""
    if not isinstance(previous, ResidentWeights):
        return False
    shared = (isinstance(following, ResidentWeights) and previous.is_loaded()
              and following.share_key() == previous.share_key())
    if shared:
        following.adopt(previous)
    previous.release()
    if not shared:
        free_accelerator(previous.device)
    return shared
