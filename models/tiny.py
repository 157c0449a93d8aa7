"""Offline tiny models: a real architecture with a tiny config, random weights from a fixed seed, a local tokenizer.

A tiny model is written once to a cache folder in the same layout as a released checkpoint (config.json,
generation_config.json, safetensors, tokenizer files) and then loaded through exactly the same code as the real one.
The ``-realtok`` models carry the released Qwen3 tokenizer files instead (models/real_tokenizer.py) and the real
vocabulary size. Each family declares its recipes (``Family.tiny`` in models/families/); this module writes them.

A local tokenizer holds only the special tokens a model family uses, in the release's order, at ids 0, 1, ...; so a
mask token sits at its released id only on a ``-realtok`` model (``tiny-sdar-realtok``: ``<|MASK|>`` = 151669).
Callers read every id by its token string, as for a real checkpoint.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from harness.files import cache_root  # a leaf: tiny models and evalplus ground truth share one cache root
from models.families import TINY_MODELS
from models.family import GenerationTokens, TinyModel
from models.tokenizer import build_tokenizer

FORMAT_VERSION = "3"  # bumped when a recipe changes, so no cached copy of the old one is read


def write_generation_config(folder: Path, tokenizer, tokens: GenerationTokens) -> None:
    """generation_config.json with the ids of these tokens (the native networks' save_network writes none)."""
    from transformers import GenerationConfig

    ids = tokenizer.convert_tokens_to_ids
    GenerationConfig(bos_token_id=ids(tokens.bos), eos_token_id=[ids(t) for t in tokens.eos],
                     pad_token_id=ids(tokens.pad)).save_pretrained(folder)


def write_network(recipe: TinyModel, folder: Path, tokenizer) -> None:
    """The recipe's network into the folder: a transformers model as it is, a native config built with seeded
    weights (and its generation_config.json)."""
    network = recipe.network(tokenizer, recipe.seed)
    if hasattr(network, "save_pretrained"):
        network.save_pretrained(folder)
        return
    from models.networks.loading import build_network, save_network

    save_network(build_network(network, seed=recipe.seed), folder)
    if recipe.generation is not None:
        write_generation_config(folder, tokenizer, recipe.generation)


def materialize(name: str, root: Path | None = None) -> Path:
    """Return the folder of tiny model ``name``, building it on first use (atomically, so concurrent runs agree)."""
    recipe = TINY_MODELS[name]
    root = root or cache_root()
    folder = root / "tiny" / f"{name}-v{FORMAT_VERSION}-seed{recipe.seed}"
    if (folder / "config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        if recipe.write_tokenizer is not None:
            from transformers import AutoTokenizer

            recipe.write_tokenizer(staging, root)
            tokenizer = AutoTokenizer.from_pretrained(staging)  # as a checkpoint folder's tokenizer is read
        else:
            tokenizer = build_tokenizer(recipe.tokenizer)
            tokenizer.save_pretrained(staging)
        write_network(recipe, staging, tokenizer)
        try:
            staging.rename(folder)
        except OSError:  # another process won the race; its copy is identical
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
