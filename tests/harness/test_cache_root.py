"""One cache root for everything the harness computes once: $DLLM_HARNESS_CACHE, else the XDG cache."""

from __future__ import annotations

from pathlib import Path

from harness.files import cache_root
from tasks.evalplus.releases import MBPP_PLUS, problem
from tasks.evalplus.groundtruth import default_cache_dir, ground_truth
from tasks.registry import make_task


def test_the_variable_wins_over_the_xdg_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DLLM_HARNESS_CACHE", raising=False)
    assert cache_root() == tmp_path / "xdg" / "dllm-harness"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "dllm-harness"
    monkeypatch.setenv("DLLM_HARNESS_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


def test_tiny_models_and_evalplus_ground_truth_share_it(tmp_path, monkeypatch):
    import models.tiny

    monkeypatch.setenv("DLLM_HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.tiny.cache_root() == default_cache_dir().parent == tmp_path / "cache"


def test_evalplus_ground_truth_is_cached_under_the_variable(tmp_path, monkeypatch):
    """The expected outputs of a real problem, computed in the sandbox, land under $DLLM_HARNESS_CACHE/evalplus."""
    monkeypatch.setenv("DLLM_HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    task = make_task("mbpp_plus")
    doc = task.docs(task.load("fixtures", None).records)[0]
    truth = ground_truth([problem(MBPP_PLUS, doc.data)])
    assert len(truth) == 1
    entries = list((tmp_path / "cache" / "evalplus").glob("v*-*.json.gz"))
    assert len(entries) == 1 and not (tmp_path / "xdg").exists()
