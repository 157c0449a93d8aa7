"""``gen_tokens_after_stop`` is counted on the generated ids, never by re-tokenising the cut text."""

from __future__ import annotations

import torch

from models.base import GenerationRequest, Message
from models.decoders.contract import DecodeResult
from models.registry import load_adapter, spec_for

CPU = torch.device("cpu")


def finish_ids(adapter, ids: list[int], stop: tuple[str, ...]):
    request = GenerationRequest(messages=(Message("user", "hi"),), canvas_tokens=len(ids), stop=stop)
    batch = adapter.prepare([request], adapter.make_config())
    (generation,) = adapter.finish(batch, [DecodeResult(token_ids=ids, nfe=1.0, hit_max_tokens=True)])
    return generation


def test_split_bytes_are_not_over_counted():
    adapter = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32)
    tok = adapter.tokenizer
    lone = tok.convert_tokens_to_ids("Ã")  # the byte 0xC3 alone: half of a UTF-8 character, decodes to U+FFFD
    word = tok("The answer", add_special_tokens=False)["input_ids"]
    tail = tok(" is 72", add_special_tokens=False)["input_ids"]
    ids = word + [lone] * 6 + tail + [tok.eos_token_id]
    assert "\ufffd" in tok.decode(ids)
    old_count = len(tok(tok.decode(ids, skip_special_tokens=True), add_special_tokens=False)["input_ids"])
    assert old_count > len(ids) - 1  # re-tokenising U+FFFD gives three bytes per lone byte

    whole = finish_ids(adapter, ids, ())
    assert whole.gen_tokens == len(ids)
    assert whole.gen_tokens_after_stop == len(ids) - 1  # every id but the end-of-sequence one

    cut = finish_ids(adapter, ids, (" is",))
    assert cut.text.endswith("\ufffd") and " is" not in cut.text
    assert cut.gen_tokens_after_stop == len(word) + 6 <= cut.gen_tokens


def test_stop_inside_a_token_counts_that_token():
    adapter = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32)
    ids = adapter.tokenizer("The answer is 72. The best", add_special_tokens=False)["input_ids"]
    generation = finish_ids(adapter, ids, ("swer",))
    pieces = [adapter.tokenizer.decode(ids[:n]) for n in range(len(ids) + 1)]
    expected = next(n for n, text in enumerate(pieces) if text.startswith(generation.text))
    assert generation.text == "The an"
    assert generation.gen_tokens_after_stop == expected
