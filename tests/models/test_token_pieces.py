"""Per-token text for the report's decode replay: each id's piece, joined, is the whole decode, and a character
split over several ids (UTF-8 bytes) belongs to the id that completes it."""

from __future__ import annotations

import torch

from models.base import token_pieces
from models.registry import load_adapter, spec_for


def test_pieces_join_to_the_decode_and_split_characters_go_to_their_last_id():
    tokenizer = load_adapter(spec_for("tiny-qwen3"), torch.device("cpu"), torch.float32).tokenizer
    text = "Héllo wörld 日本語 🎉\nThe answer is 42." * 3
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    pieces = token_pieces(tokenizer, ids)
    assert pieces is not None and len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=False)
    assert "\ufffd" not in "".join(pieces) and "" in pieces  # multi-byte characters: whole, on one id each
    assert pieces[-1] == tokenizer.decode([tokenizer.eos_token_id], skip_special_tokens=False)
    assert token_pieces(tokenizer, []) == ()
