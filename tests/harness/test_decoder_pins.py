"""Each decoder's outputs on fixed tiny inputs, pinned together with its version.

A change-detector, not a correctness test (the decoder tests compare decoders against independent computations):
a sample key carries its decoder's version, so a change that alters what a decoder outputs without raising its
version would let a rerun reuse the old outputs and mix two decoders in one result. Each pin is the sha256 of the
output token ids of one batch-1 static decode (the decoder's ``generate``) of a tiny random model, greedy and with
one seeded sampling config (DiffusionGemma always samples: two of its configs). When a change is meant, raise the
decoder's ``version=`` in its ``Decoder(...)`` record and put the new version and hashes here.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import pkgutil

import pytest
import torch

import models.adapters
import models.decoders
from models.base import GenerationRequest
from models.decoders.contract import Decoder
from models.registry import load_adapter, spec_for

PROMPT = "Two plus three is"
# decoder: (version, tiny model, canvas, {config: (options, sha256 of the output ids, first 16 hex digits)})
PINS = {
    "ar": (1, "tiny-qwen3", 32, {
        "greedy": ({}, "e6e9747d0dfe9ac4"),
        "sampled": ({"do_sample": "true", "temperature": "0.8"}, "22fec975d2308efc")}),
    "refusion": (1, "tiny-refusion", 32, {
        "greedy": ({}, "a053c032597e21c2"),
        "sampled": ({"temperature": "0.8"}, "36b6c979184e7cc0")}),
    "llada": (1, "tiny-llada", 32, {
        "greedy": ({}, "da06696996d0fd5b"),
        "sampled": ({"temperature": "0.8"}, "ad909a87c121c4be")}),
    "dream": (1, "tiny-dream", 32, {
        "greedy": ({}, "7d7e6f659afe2b33"),
        "sampled": ({"temperature": "0.8"}, "effa15f4f27c36f3")}),
    "llada-fastdllm": (2, "tiny-llada-fastdllm", 32, {
        "greedy": ({}, "67d4dc2a8907f0f2"),
        "sampled": ({"temperature": "0.8"}, "23487ad5d55cf3ff")}),
    "dream-fastdllm": (2, "tiny-dream-fastdllm", 32, {
        "greedy": ({}, "7f79ee2f8662baa8"),
        "sampled": ({"temperature": "0.8"}, "18c7901e991008b6")}),
    "block-diffusion": (1, "tiny-sdar", 32, {
        "greedy": ({"temperature": "0"}, "9061da009fa1480f"),
        "sampled": ({"temperature": "1.0"}, "38f2000214990998")}),
    "diffusiongemma": (1, "tiny-diffusiongemma", 16, {
        "8 steps": ({"max_denoising_steps": "8"}, "2c70c9fc5a64d9a1"),
        "sampled": ({}, "d824db281fee254d")}),
}
SERVED = {"vllm", "openai"}  # a server decodes them: nothing local to pin (the server's version is its own)
SEED = 1234


def every_decoder() -> dict[str, Decoder]:
    """Every ``Decoder`` record the decoder and adapter packages define, by name."""
    found: dict[str, Decoder] = {}
    for package in (models.decoders, models.adapters):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            found.update({v.name: v for v in vars(module).values() if isinstance(v, Decoder)})
    return found


def output_hash(model: str, canvas: int, options: dict[str, str]) -> tuple[str, Decoder]:
    adapter = load_adapter(spec_for(model), torch.device("cpu"), torch.float32)
    config = adapter.make_config(options, canvas, SEED)
    batch = adapter.prepare([GenerationRequest(prompt=PROMPT, canvas_tokens=canvas)], config)
    (row,) = adapter.decode(batch)
    return hashlib.sha256(json.dumps(row.token_ids).encode()).hexdigest()[:16], adapter.decoder


def test_every_decoder_is_pinned():
    decoders = every_decoder()
    unpinned = sorted(set(decoders) - set(PINS) - SERVED)
    assert not unpinned, f"decoder(s) {', '.join(unpinned)} have no pin: add them to PINS in {__file__}"
    assert all(d.version >= 1 for d in decoders.values())
    for name, (version, *_) in PINS.items():
        assert decoders[name].version == version, (
            f"the {name} decoder is at version {decoders[name].version}, its pin at {version}: put the new version "
            f"and its output hashes in PINS ({__file__})")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PINS))
def test_outputs_match_the_pin_of_the_decoder_s_version(name):
    version, model, canvas, configs = PINS[name]
    for label, (options, pinned) in configs.items():
        got, decoder = output_hash(model, canvas, options)
        assert decoder.name == name and decoder.version == version
        assert got == pinned, (
            f"the {name} decoder's outputs changed ({label} config: {got}, pinned {pinned} at version {version}): "
            f"raise its version in its Decoder record (version={version + 1}) so stored samples are regenerated, "
            f"and update its pin in {__file__}")
