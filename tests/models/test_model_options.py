"""Typed options: every --model-arg string and registry value is coerced and checked once, against the config
that the decoder runs; bad values and bad combinations fail with one line before any model generates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
import torch

from harness.cli import main
from models.adapters.dream import DreamAdapter, FastDreamAdapter
from models.adapters.llada import FastLLaDAAdapter, LLaDAAdapter
from models.decoders.contract import ConfigError, canvas_of, require_filled
from models.decoders.dream import DREAM
from models.decoders.fastdllm.llada_sampler import FastLLaDAConfig
from models.decoders.llada import LLADA
from models.options import coerce, option, record, set_options
from models.registry import adapter_class, load_adapter, spec_for

CPU = torch.device("cpu")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value,hint,expected", [
    ("16", int, 16), (16, int, 16), ("0.5", float, 0.5), (1, float, 1.0), ("true", bool, True), ("False", bool, False),
    (True, bool, True), ("none", int | None, None), (None, float | None, None), ("7", int | None, 7),
    ("dual", Literal["none", "dual"], "dual"), ("x", str, "x"),
])
def test_values_are_coerced_to_the_field_type(value, hint, expected):
    got = coerce("m", "opt", value, hint)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("value,hint,needle", [
    ("abc", int, "option opt=abc is not an int"), ("1.5", int, "is not an int"), (True, int, "is not an int"),
    ("maybe", bool | None, "option opt=maybe is not a bool"), (1, bool, "is not a bool"),
    ("fast", float, "is not a float"), ("nan", float, "is not a float"), ("none", int, "is not an int"),
    (None, int, "opt=none is not allowed"),
    ("triple", Literal["none", "dual"], "is not one of none, dual"), (3, str, "is not a str"),
])
def test_wrong_values_are_one_line_errors(value, hint, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        coerce("m", "opt", value, hint)
    assert str(info.value).startswith("m: ") and "\n" not in str(info.value)


def test_nested_options_are_addressed_by_leaf_names_and_filled_fields_are_not_options():
    config = set_options(FastLLaDAConfig(), {"steps": "64", "threshold": "none", "cache": "prefix"}, "m")
    assert (config.llada.steps, config.threshold, config.cache) == (64, None, "prefix")
    assert config.llada.block_length == 32  # Fast-dLLM's own default, kept
    with pytest.raises(ConfigError, match="unknown option mask_id; valid options: block_length, cache, "):
        set_options(FastLLaDAConfig(), {"mask_id": "3"}, "m")
    assert "mask_id" not in record(FastLLaDAConfig()) and record(FastLLaDAConfig())["gen_length"] is None
    seeded = set_options(config, {}, "m", seed=9)
    assert option(seeded, "seed") == 9 and option(set_options(seeded, {}, "m", seed=10), "seed") == 9
    assert option(set_options(config, {"seed": "3"}, "m", seed=9), "seed") == 3  # an explicit seed wins
    assert option(set_options(config, {"seed": "none"}, "m", seed=9), "seed") == 9  # none means the run's



def test_filled_fields_are_found_inside_nested_configs():
    """The check a decoder runs at the start of a decode reads field paths found once per config class; the nested
    plain config's canvas and token ids are among them."""
    config = FastLLaDAConfig()
    assert canvas_of(config) is None
    with pytest.raises(ConfigError, match=r"^m: gen_length is not set \(LLaDAConfig\.gen_length"):
        require_filled(config, "m")
    config = set_options(config, {"gen_length": 64}, "m", adapter_fields=True)
    assert canvas_of(config) == 64
    with pytest.raises(ConfigError, match="mask_id is not set"):
        require_filled(config, "m")
    require_filled(config, "m", ("canvas",))
    filled = set_options(config, {"mask_id": 5, "eos_id": 1, "eot_id": 2}, "m", adapter_fields=True)
    require_filled(filled, "m")

def test_plain_and_fastdllm_are_distinct_kinds_choosing_their_decoder():
    assert adapter_class("llada") is LLaDAAdapter and LLaDAAdapter.decoder is LLADA
    assert adapter_class("llada-fastdllm") is FastLLaDAAdapter and adapter_class("dream-fastdllm") is FastDreamAdapter
    plain = load_adapter(spec_for("tiny-llada"), CPU, torch.float32)
    with pytest.raises(ConfigError, match="unknown option threshold"):
        plain.make_config({"threshold": "0.9"})
    fast = load_adapter(spec_for("tiny-llada-fastdllm"), CPU, torch.float32)
    with pytest.raises(ConfigError, match="no cfg_scale"):
        fast.make_config({"cfg_scale": "1"}, canvas=64)


def test_llada_15_and_dream_coder_resolve_to_their_families_with_published_defaults():
    llada = load_adapter(spec_for("llada-1.5"), CPU, torch.bfloat16)  # no weights or tokenizer load here
    assert type(llada) is LLaDAAdapter and llada.source.ref == "GSAI-ML/LLaDA-1.5"
    overrides = spec_for("llada-1.5").overrides_for("gsm8k", "paper")
    assert overrides == {"gen_length": 256, "block_length": 16, "confidence_eos_eot_inf": True}
    overrides.pop("gen_length")
    config = llada.make_config(overrides, canvas=256).decoder
    assert (config.gen_length, config.steps, config.block_length, config.confidence_eos_eot_inf) == (256, 256, 16, True)
    coder = load_adapter(spec_for("dream-coder"), CPU, torch.bfloat16)
    assert type(coder) is DreamAdapter and coder.decoder is DREAM
    assert coder.source.ref == "Dream-org/Dream-Coder-v0-Instruct-7B"
    config = coder.make_config(canvas=512).decoder
    assert (config.temperature, config.top_p, config.alg, config.alg_temp, config.steps) == (0.1, 1.0, "entropy",
                                                                                             0.0, 512)


def one_line_error(capsys, argv: list[str]) -> str:
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def run_args(tmp_path, models: str, *extra: str) -> list[str]:
    return ["--models", models, "--tasks", "gsm8k", "--data", "fixtures", "--limit", "1", "--no-progress",
            "--output", str(tmp_path / "run"), *extra]


@pytest.mark.parametrize("model,arg,needle", [
    ("tiny-refusion", "slot_size=abc", "tiny-refusion: option slot_size=abc is not an int"),
    ("tiny-llada", "steps=abc", "tiny-llada: option steps=abc is not an int"),
    ("tiny-qwen3", "top_k=abc", "tiny-qwen3: option top_k=abc is not an int"),
    ("tiny-qwen3", "enable_thinking=maybe", "tiny-qwen3: option enable_thinking=maybe is not a bool"),
    # 0 is a value, not "unset": it must not fall back to the canvas default
    ("tiny-llada", "steps=0", "tiny-llada: steps (0) must be a positive multiple"),
    ("tiny-llada", "block_length=0", "tiny-llada: block_length must be >= 1, got 0"),
    ("tiny-dream", "steps=0", "tiny-dream: steps must be >= 1, got 0"),
    ("tiny-dream-fastdllm", "steps=0", "tiny-dream-fastdllm: steps must be >= 1, got 0"),
])
def test_bad_model_arg_values_exit_2_with_one_line(capsys, tmp_path, model, arg, needle):
    err = one_line_error(capsys, run_args(tmp_path, model, "--gen-length", "32", "--model-arg", f"{model}.{arg}"))
    assert needle in err
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").rglob("*.jsonl"))


def test_run_eval_script_reports_a_bad_value_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "run_eval.py"), *run_args(tmp_path, "tiny-refusion"),
                           "--model-arg", "slot_size=abc"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: tiny-refusion: option slot_size=abc is not an int"


def test_unknown_preset_lists_the_valid_ones(capsys, tmp_path):
    err = one_line_error(capsys, run_args(tmp_path, "tiny-qwen3,tiny-refusion", "--preset", "papr"))
    assert "unknown preset papr" in err and "paper" in err


def test_bad_canvas_combination_fails_before_any_model_generates(capsys, tmp_path):
    err = one_line_error(capsys, run_args(tmp_path, "tiny-qwen3,tiny-refusion", "--gen-length", "100"))
    assert "tiny-refusion" in err and "gen_length=100 does not split" in err
    assert not (tmp_path / "run").exists() or not [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
