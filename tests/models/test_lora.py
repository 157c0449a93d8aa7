"""LoRA adapters merged at load (models/networks/lora.py): the native Qwen3 network and transformers' with an adapter
made by peft equal peft's own merged model; a tiny LLaDA and a tiny SDAR with adapters written here in PEFT's format
equal a merge done here on the state dict; a zero-B adapter run through run_eval gives the base model's tokens under
keys of its own (by the files' hash, so a moved folder keeps them); every mismatch is one line before decoding."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from harness.cli import main
from harness.errors import UserError
from models.decoders.contract import ConfigError
from models.networks.loading import load_network
from models.networks.lora_folder import AdapterError, read_lora_folder, same_base
from models.registry import describe_options, load_adapter, spec_for
from models.tiny import materialize

CPU = torch.device("cpu")
PREFIX = "base_model.model."


def write_adapter(folder: Path, tensors: dict[str, torch.Tensor], **config) -> Path:
    """A PEFT LoRA folder as peft's save_pretrained writes it: adapter_config.json and adapter_model.safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "adapter_model.safetensors"),
              metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, **config}))
    return folder


def factors(shapes: dict[str, list[int]], rank: int, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Random (A, B) of ``rank`` for each module name -> its weight's [out, in]."""
    gen = torch.Generator().manual_seed(seed)
    return {module: (torch.randn(rank, cols, generator=gen) * 0.3, torch.randn(rows, rank, generator=gen) * 0.3)
            for module, (rows, cols) in shapes.items()}


def peft_tensors(pairs: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    out = {}
    for module, (a, b) in pairs.items():
        out[f"{PREFIX}{module}.lora_A.weight"], out[f"{PREFIX}{module}.lora_B.weight"] = a, b
    return out


def logits(network, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = network(ids)
    return out.logits if hasattr(out, "logits") else out


IDS = torch.randint(0, 500, (2, 12), generator=torch.Generator().manual_seed(0))


# ---- peft's own adapter on the tiny Qwen3 ---------------------------------------------------------------------------


PEFT_CONFIGS = {
    # every projection, with ranks and alphas per module by pattern
    "patterns": dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                        "up_proj", "down_proj"],
                     rank_pattern={"down_proj": 2}, alpha_pattern={"layers.1.self_attn.q_proj": 3}),
    # rank-stabilised scaling, and the (tied) embedding as a LoRA Embedding
    "rslora+embedding": dict(r=8, lora_alpha=4, use_rslora=True, target_modules=["embed_tokens", "q_proj", "up_proj"]),
}


@pytest.fixture(scope="module", params=list(PEFT_CONFIGS))
def peft_adapter(request, tmp_path_factory):
    """(the adapter folder peft saved, peft's merged model) on tiny-qwen3, with non-zero B."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3ForCausalLM

    folder = materialize("tiny-qwen3")
    torch.manual_seed(1)
    base = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with warnings.catch_warnings():  # peft warns about the tied embedding, which both sides merge alike
        warnings.simplefilter("ignore")
        model = get_peft_model(base, LoraConfig(init_lora_weights=False, **PEFT_CONFIGS[request.param]))
        out = tmp_path_factory.mktemp("peft") / request.param
        model.save_pretrained(out)
        return out, model.merge_and_unload().eval()


def test_native_qwen3_with_peft_adapter_equals_peft_merge(peft_adapter):
    folder, merged = peft_adapter
    base = load_network(materialize("tiny-qwen3"), "qwen3", dtype=torch.float32)
    native = load_network(materialize("tiny-qwen3"), "qwen3", dtype=torch.float32, adapter=read_lora_folder(folder))
    expected = logits(merged, IDS)
    assert torch.allclose(logits(native, IDS), expected, atol=1e-5, rtol=1e-5)
    assert (logits(base, IDS) - expected).abs().max() > 1e-2  # the adapter changes the output


def test_transformers_and_native_paths_of_an_adapter_load_the_merge(peft_adapter):
    folder, merged = peft_adapter
    adapter = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32, {"adapter": str(folder)})
    assert adapter.native_kind == "qwen3"
    expected = logits(merged, IDS)
    assert torch.allclose(logits(adapter.network, IDS), expected, atol=1e-5, rtol=1e-5)  # transformers' model
    assert torch.allclose(logits(adapter.native_network, IDS), expected, atol=1e-5, rtol=1e-5)
    assert adapter.identity()["adapter"] == read_lora_folder(folder).sha256


def test_diffusion_gemma_with_peft_adapter_equals_peft_merge(tmp_path):
    """transformers' own DiffusionGemma (its names are the model transformers builds): every tensor as peft merges."""
    import transformers
    from peft import LoraConfig, get_peft_model

    folder = materialize("tiny-diffusiongemma")
    base = transformers.DiffusionGemmaForBlockDiffusion.from_pretrained(folder, dtype=torch.float32).eval()
    plain = {name: t.clone() for name, t in base.state_dict().items()}
    torch.manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                                target_modules=r".*language_model.*\.(q_proj|down_proj)"))
        model.save_pretrained(tmp_path / "dg")
        expected = model.merge_and_unload().state_dict()
    got = load_adapter(spec_for("tiny-diffusiongemma"), CPU, torch.float32,
                       {"adapter": str(tmp_path / "dg")}).network.state_dict()
    assert got.keys() == expected.keys()
    assert all(torch.allclose(got[n], expected[n], atol=1e-6, rtol=1e-6) for n in got)
    assert sum(not torch.equal(got[n], plain[n]) for n in got) >= 4  # two layers' q_proj and down_proj at least


# ---- adapters written here, against a merge done here ---------------------------------------------------------------


def merged_state(state: dict[str, torch.Tensor], pairs, scales: dict[str, float],
                 transposed: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    out = dict(state)
    for module, (a, b) in pairs.items():
        delta = scales[module] * (b @ a)
        out[f"{module}.weight"] = state[f"{module}.weight"] + (delta.T if module in transposed else delta)
    return out


def assert_loads_as(folder, kind: str, adapter: Path, expected: dict[str, torch.Tensor]) -> None:
    got = load_network(folder, kind, dtype=torch.float32, adapter=read_lora_folder(adapter))
    state = got.state_dict()
    assert state.keys() == expected.keys()
    for name in state:
        assert torch.allclose(state[name], expected[name], atol=1e-6, rtol=1e-6), name
    reference = load_network(folder, kind, dtype=torch.float32)
    reference.load_state_dict(expected)
    assert torch.allclose(logits(got, IDS), logits(reference, IDS), atol=1e-5, rtol=1e-5)


def test_tiny_llada_adapter_equals_a_merge_of_the_state_dict(tmp_path):
    folder = materialize("tiny-llada")
    base = load_network(folder, "llada", dtype=torch.float32).state_dict()
    blocks = "model.transformer.blocks"
    shapes = {f"{blocks}.0.q_proj": [64, 64], f"{blocks}.1.q_proj": [64, 64], f"{blocks}.1.v_proj": [64, 64]}
    pairs = factors(shapes, 4, seed=2)
    # "ff_out" matches a block's ff_out and the head (model.transformer.ff_out) alike: rank 2 for both
    pairs.update(factors({f"{blocks}.0.ff_out": [64, 96], "model.transformer.ff_out": [512, 64]}, 2, seed=3))
    adapter = write_adapter(tmp_path / "llada-lora", peft_tensors(pairs), r=4, lora_alpha=16,
                            rank_pattern={"ff_out": 2}, alpha_pattern={"blocks.1.q_proj": 2})
    scales = {f"{blocks}.0.q_proj": 16 / 4, f"{blocks}.1.q_proj": 2 / 4, f"{blocks}.1.v_proj": 16 / 4,
              f"{blocks}.0.ff_out": 16 / 2, "model.transformer.ff_out": 16 / 2}
    assert_loads_as(folder, "llada", adapter, merged_state(base, pairs, scales))


def test_tiny_sdar_adapter_with_rslora_embedding_and_saved_module_equals_a_merge(tmp_path):
    folder = materialize("tiny-sdar")
    base = load_network(folder, "sdar", dtype=torch.float32).state_dict()
    shapes = {"model.layers.0.self_attn.k_proj": [32, 64], "model.layers.1.mlp.down_proj": [64, 128]}
    pairs = factors(shapes, 8, seed=4)
    gen = torch.Generator().manual_seed(5)
    emb_a, emb_b = torch.randn(8, 512, generator=gen), torch.randn(64, 8, generator=gen)  # PEFT's Embedding layout
    head = torch.randn(512, 64, generator=gen) * 0.1  # modules_to_save=["lm_head"]: stored whole
    tensors = {**peft_tensors(pairs), f"{PREFIX}model.embed_tokens.lora_embedding_A": emb_a,
               f"{PREFIX}model.embed_tokens.lora_embedding_B": emb_b, f"{PREFIX}lm_head.weight": head}
    adapter = write_adapter(tmp_path / "sdar-lora", tensors, r=8, lora_alpha=4, use_rslora=True,
                            modules_to_save=["lm_head"])
    scale = 4 / math.sqrt(8)
    expected = merged_state({**base, "lm_head.weight": head}, {**pairs, "model.embed_tokens": (emb_a, emb_b)},
                            dict.fromkeys([*shapes, "model.embed_tokens"], scale), transposed=("model.embed_tokens",))
    assert_loads_as(folder, "sdar", adapter, expected)


# ---- a run: zero B is the base model; keys by hash -------------------------------------------------------------------


def zero_b_adapter(folder: Path, base: str | None) -> Path:
    pairs = factors({"model.layers.0.self_attn.q_proj": [64, 64], "model.layers.1.mlp.up_proj": [128, 64]}, 4, 6)
    tensors = peft_tensors({m: (a, torch.zeros_like(b)) for m, (a, b) in pairs.items()})
    return write_adapter(folder, tensors, base_model_name_or_path=base)


def run(output: Path, *extra: str) -> int:
    return main(["--models", "tiny-qwen3", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "2", "--preset",
                 "smoke", "--no-progress", "--output", str(output), *extra])


def samples_of(output: Path, field: str) -> list:
    lines = (output / "samples" / "tiny-qwen3" / "gsm8k.jsonl").read_text().splitlines()
    return [json.loads(line)[field] for line in lines]


def test_zero_b_adapter_run_gives_the_base_tokens_under_keys_of_its_own(tmp_path, capsys, monkeypatch):
    from harness import cli
    from reports.report_data import gather

    monkeypatch.setattr(cli, "write_run_report", lambda output: "report: not built here")  # the label is read below
    adapter = zero_b_adapter(tmp_path / "zero", str(materialize("tiny-qwen3")))
    assert run(tmp_path / "base") == 0
    assert run(tmp_path / "lora", "--model-arg", f"tiny-qwen3.adapter={adapter}") == 0
    tokens = samples_of(tmp_path / "base", "token_ids")
    assert samples_of(tmp_path / "lora", "token_ids") == tokens and all(tokens)
    sha = read_lora_folder(adapter).sha256
    manifest = json.loads((tmp_path / "lora" / "results.json").read_text())["results"][0]["manifest"]
    assert manifest["model"]["adapter"] == manifest["adapter"] == sha
    assert str(adapter) not in json.dumps(manifest)  # the path is a setting of the run, not part of the result
    assert not set(samples_of(tmp_path / "lora", "key")) & set(samples_of(tmp_path / "base", "key"))
    assert gather([tmp_path / "lora"]).labels == (f"tiny-qwen3 (LoRA {sha[:8]})",)
    # the same files elsewhere: the stored samples are still this adapter's
    moved = shutil.copytree(adapter, tmp_path / "moved")
    capsys.readouterr()
    assert run(tmp_path / "lora", "--model-arg", f"tiny-qwen3.adapter={moved}") == 0
    assert "2 of 2 samples already stored, skipped" in capsys.readouterr().out


# ---- one-line errors, before decoding --------------------------------------------------------------------------------


def one_line(error: BaseException) -> str:
    text = str(error)
    assert isinstance(error, UserError) and "\n" not in text
    return text


def qwen3_adapter(tmp_path: Path, name: str = "a", shapes=None, **config) -> Path:
    shapes = shapes or {"model.layers.0.self_attn.q_proj": [64, 64]}
    return write_adapter(tmp_path / name, peft_tensors(factors(shapes, config.get("r", 4), 7)), **config)


@pytest.mark.parametrize("config, says", [
    ({"base_model_name_or_path": "GSAI-ML/LLaDA-8B-Instruct"}, "trained on GSAI-ML/LLaDA-8B-Instruct"),
    ({"peft_type": "IA3"}, "PEFT type 'IA3'; only LORA"),
    ({"use_dora": True}, "uses use_dora"),
    ({"init_lora_weights": "pissa"}, "moves the base weights"),
])
def test_an_adapter_of_another_model_or_kind_fails_at_planning(tmp_path, config, says):
    folder = qwen3_adapter(tmp_path, **config)
    with pytest.raises(AdapterError) as info:
        load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32, {"adapter": str(folder)})
    assert says in one_line(info.value)


def test_a_folder_that_is_not_an_adapter_fails_at_planning(tmp_path):
    folder = qwen3_adapter(tmp_path)
    (folder / "adapter_model.safetensors").unlink()
    for path, says in ((folder, "not a PEFT adapter folder: it has no adapter_model.safetensors"),
                       (tmp_path / "nowhere", "is not a folder")):
        with pytest.raises(AdapterError) as info:
            load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32, {"adapter": str(path)})
        assert says in one_line(info.value)


Q_PROJ = "model.layers.0.self_attn.q_proj"


@pytest.mark.parametrize("shapes, config, says", [
    ({Q_PROJ: [32, 64]}, {}, f"mis-shaped {Q_PROJ} gives [32, 64] vs [64, 64]"),
    ({Q_PROJ: [64, 64]}, {"rank_pattern": {"q_proj": 2}}, f"{Q_PROJ} rank 4 (lora_A) / 4 (lora_B) vs r=2"),
    ({"model.layers.5.self_attn.q_proj": [64, 64], "model.layers.0.attn.c_attn": [64, 64]}, {},
     "match no parameter of the Qwen3 network: model.layers.0.attn.c_attn, model.layers.5.self_attn.q_proj"),
])
def test_shapes_ranks_and_targets_are_checked_before_any_weight_is_read(tmp_path, shapes, config, says):
    files = read_lora_folder(write_adapter(tmp_path / "a", peft_tensors(factors(shapes, 4, 8)), **config))
    with pytest.raises(AdapterError) as info:
        load_network(materialize("tiny-qwen3"), "qwen3", dtype=torch.float32, adapter=files)
    assert says in one_line(info.value)


def test_a_module_trained_whole_on_a_tied_weight_is_refused_on_both_paths(tmp_path):
    """PEFT trains a modules_to_save copy apart from the weight tied to it; replacing the tied weight would change
    the head too (tiny-qwen3 ties its embeddings to its head)."""
    embed = torch.randn(512, 64, generator=torch.Generator().manual_seed(9))
    folder = write_adapter(tmp_path / "a", {f"{PREFIX}model.embed_tokens.weight": embed},
                           modules_to_save=["embed_tokens"])
    files = read_lora_folder(folder)
    with pytest.raises(AdapterError) as info:
        load_network(materialize("tiny-qwen3"), "qwen3", dtype=torch.float32, adapter=files)
    assert "trained model.embed_tokens.weight whole (modules_to_save)" in one_line(info.value)
    adapter = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32, {"adapter": str(folder)})
    with pytest.raises(AdapterError, match="ties that weight to another"):
        adapter.network  # noqa: B018  (transformers' model, where the two names share one tensor)


def test_a_run_with_a_bad_adapter_is_one_line_and_leaves_no_folder(tmp_path, capsys):
    folder = qwen3_adapter(tmp_path, base_model_name_or_path="Qwen/Qwen3-8B")
    assert run(tmp_path / "out", "--model-arg", f"tiny-qwen3.adapter={folder}") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trained on Qwen/Qwen3-8B" in err and not (tmp_path / "out").exists()
    mismatched = qwen3_adapter(tmp_path, "b", {"model.layers.9.mlp.up_proj": [128, 64]})
    adapter = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32, {"adapter": str(mismatched)})
    with pytest.raises(AdapterError, match="match no parameter"):
        adapter.native_network  # noqa: B018  (on first use: the load, before any decode)


def test_adapter_is_set_per_model_and_only_where_this_process_loads_weights(tmp_path):
    folder, other = qwen3_adapter(tmp_path, "a"), qwen3_adapter(tmp_path, "b")
    adapter = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32, {"adapter": str(folder)})
    adapter.make_config({"adapter": str(folder), "temperature": "0"})  # the one it loaded: fine
    with pytest.raises(ConfigError, match="not the LoRA the model was loaded with"):
        adapter.make_config({"adapter": str(other)})
    with pytest.raises(AdapterError, match="not the vllm kind's"):
        load_adapter(spec_for("vllm:tiny-qwen3"), CPU, torch.float32, {"adapter": str(folder)})
    plain = load_adapter(spec_for("tiny-qwen3"), CPU, torch.float32, {"adapter": "none"})
    assert "adapter" not in plain.identity() and plain.share_key() != adapter.share_key()
    assert any(line.startswith("adapter=") for line in describe_options("llada"))
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes() + b" ")
    with pytest.raises(AdapterError, match="changed since the run was planned"):
        adapter.native_network  # noqa: B018


@pytest.mark.parametrize("a, b, same", [
    ("GSAI-ML/LLaDA-8B-Instruct", "GSAI-ML/LLaDA-8B-Instruct", True),
    ("GSAI-ML/LLaDA-8B-Instruct", "gsai-ml/llada-8b-instruct", True),
    ("GSAI-ML/LLaDA-8B-Instruct", "/data/models/LLaDA-8B-Instruct", True),  # a local copy: only the names count
    ("GSAI-ML/LLaDA-8B-Instruct", "/hf/hub/models--GSAI-ML--LLaDA-8B-Instruct/snapshots/0123abc", True),
    ("GSAI-ML/LLaDA-8B-Instruct", "GSAI-ML/LLaDA-1.5", False),
    ("GSAI-ML/LLaDA-8B-Instruct", "someone/LLaDA-8B-Instruct", False),  # two hub ids: the owner counts
    ("GSAI-ML/LLaDA-8B-Instruct", "/data/models/llada-sft", False),
])
def test_base_model_names_match_up_to_a_local_path(a, b, same):
    assert same_base(a, b) is same and same_base(b, a) is same
