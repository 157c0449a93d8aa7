"""DiffusionGemma on tiny-diffusiongemma: transformers' own generate, seeded per call, counted, cut to the canvas.

transformers draws a batch's numbers from one stream, so a row's tokens depend on its batch: what is tested is what
holds instead of "a batch equals its rows alone": a batch of one is transformers' generate seeded with the row's
own seed (an independent call, not the adapter's code), the same batch twice gives the same tokens, and the
output is whole canvases cut back to the request and after the first end of sequence.
"""

from __future__ import annotations

import json

import pytest
import torch

from harness.gate.drift import is_deterministic
from harness.run.generation import generate_timed
from adapter_cases import chat
from models.base import GenerationRequest, Message
from models.decoders.contract import ConfigError
from models.decoders.diffusion_gemma import (DiffusionGemmaOptions, PassCount, call_seed, rows_from_output,
                                             validate_options)
from models.decoders.sampling import row_seed
from models.options import record
from models.registry import load_adapter, spec_for

CPU = torch.device("cpu")
SEED = 1234
STEPS = 3  # denoising steps per canvas: few, so each call is a handful of passes on the CPU
CANVAS = 16  # tiny-diffusiongemma's canvas_length


REQUESTS = [chat("What is 2 + 2?"), chat("A much longer question about apples, pears and 17 oranges?")]


def load():
    return load_adapter(spec_for("tiny-diffusiongemma"), CPU, torch.float32)


@pytest.fixture(scope="module")
def adapter():
    return load()


@pytest.fixture(scope="module")
def config(adapter):
    return adapter.make_config({"max_denoising_steps": STEPS}, seed=SEED)


def test_options_are_the_release_generation_config_and_checked_at_planning(adapter):
    assert record(adapter.default_config()) == {
        "enable_thinking": False, "max_new_tokens": None, "max_denoising_steps": 48, "entropy_bound": 0.1,
        "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005, "do_sample": True,
        "seed": None}
    assert not adapter.is_loaded()  # planning never loads the weights
    for option, match in [({"t_max": 0.3}, "t_min < t_max"), ({"entropy_bound": 0}, "entropy_bound"),
                          ({"max_denoising_steps": 0}, "max_denoising_steps"), ({"do_sample": False}, "always samples"),
                          ({"confidence_threshold": -1.0}, "confidence_threshold")]:
        with pytest.raises(ConfigError, match=match):
            adapter.make_config(option, canvas=24)
    with pytest.raises(ConfigError, match="unknown option temperature; valid options: .*t_max"):
        adapter.make_config({"temperature": 0.5})



def test_a_bad_option_ends_the_run_in_one_line_before_any_model_loads(capsys, tmp_path):
    from harness.cli import main

    code = main(["--models", "tiny-diffusiongemma", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "1",
                 "--output", str(tmp_path / "run"), "--model-arg", "tiny-diffusiongemma.t_max=0.2", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "t_min < t_max" in err
    assert not (tmp_path / "run" / "store").exists()

def test_the_checkpoint_carries_the_release_generation_config(adapter):
    generation = adapter.network.generation_config
    defaults = DiffusionGemmaOptions()
    assert (generation.max_denoising_steps, generation.sampler_config.entropy_bound, generation.t_min,
            generation.t_max, generation.stability_threshold, generation.confidence_threshold) == (
        defaults.max_denoising_steps, defaults.entropy_bound, defaults.t_min, defaults.t_max,
        defaults.stability_threshold, defaults.confidence_threshold)
    ids = adapter.tokenizer.convert_tokens_to_ids
    assert adapter.eos_ids() == [ids("<eos>"), ids("<turn|>"), ids("<|tool_response>")]
    assert adapter.token_ids()["pad_id"] == ids("<pad>") == 0 and adapter.network.config.canvas_length == CANVAS


def test_the_chat_template_renders_gemma4_turns(adapter, config):
    off = adapter.render(REQUESTS[0], config)
    assert off == "<bos><|turn>user\nWhat is 2 + 2?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    on = adapter.render(GenerationRequest(messages=(Message("system", "Be brief."), Message("user", "Hi"))),
                        adapter.make_config({"enable_thinking": True}))
    assert on == "<bos><|turn>system\n<|think|>\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
    prefilled = adapter.render(chat("Pick one.", prefill="The best answer is"), config)
    assert prefilled == "<bos><|turn>user\nPick one.<turn|>\n<|turn>model\nThe best answer is"
    batch = adapter.prepare(REQUESTS, config)
    bos = adapter.tokenizer.convert_tokens_to_ids("<bos>")
    assert batch.input_ids[0, 0] == adapter.pad_id() and batch.attention_mask[0, 0] == 0  # left padded
    assert [row[mask.bool()].tolist().count(bos) for row, mask in zip(batch.input_ids, batch.attention_mask)] == [1, 1]


def test_a_batch_of_one_is_generate_seeded_with_the_row_seed(adapter, config):
    (gen,) = adapter.generate(REQUESTS[:1], config)
    prompt = adapter.render(REQUESTS[0], config)
    ids = torch.tensor([adapter.tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

    torch.manual_seed(row_seed(SEED, prompt))  # the row's own seed, set by hand; the rest from the checkpoint
    out = adapter.network.generate(ids, max_new_tokens=24, max_denoising_steps=STEPS,
                                   sampler_config=EntropyBoundSamplerConfig(entropy_bound=0.1))
    expected = out.sequences[0, ids.shape[1]:ids.shape[1] + 24].tolist()
    eos = set(adapter.eos_ids())
    cut = next((i + 1 for i, t in enumerate(expected) if t in eos), len(expected))
    assert gen.token_ids == expected[:cut] and gen.sampling_seed == row_seed(SEED, prompt)
    assert gen.tokens_per_decoder_step == pytest.approx(float(out.tokens_per_forward[0]))


def test_the_same_batch_twice_gives_the_same_tokens_and_leaves_the_global_stream(adapter, config):
    state = torch.random.get_rng_state()
    first, second = adapter.generate(REQUESTS, config), adapter.generate(REQUESTS, config)
    assert torch.equal(state, torch.random.get_rng_state())  # seeded inside the call, restored after it
    assert [g.token_ids for g in first] == [g.token_ids for g in second]
    prompts = [adapter.render(r, config) for r in REQUESTS]
    assert {g.sampling_seed for g in first} == {call_seed([row_seed(SEED, p) for p in prompts], SEED)}
    other = adapter.make_config({"max_denoising_steps": STEPS}, seed=SEED + 1)
    assert [g.token_ids for g in adapter.generate(REQUESTS, other)] != [g.token_ids for g in first]


def test_passes_are_counted_and_timed(adapter, config):
    prompts, generations, seconds, forward_s = generate_timed(adapter, config, REQUESTS)
    assert 0 < forward_s <= seconds
    for gen in generations:
        assert gen.encoder_calls == 2  # the prompt, then the first committed canvas (24 tokens need two canvases)
        assert 2 <= gen.decoder_calls <= 2 * STEPS
        assert gen.nfe == (gen.encoder_calls + gen.decoder_calls) / len(REQUESTS)
        assert 1 <= gen.decoder_steps <= gen.decoder_calls  # its own passes; finished rows still compute in a batch
        assert gen.gen_tokens == len(gen.token_ids) <= 24 and gen.canvas_tokens == 24
    network = adapter.network
    assert not any(m._forward_hooks or m._forward_pre_hooks
                   for m in (network, network.model.encoder, network.model.decoder, network.lm_head))


def test_a_canvas_request_rounds_up_to_whole_canvases(adapter, config):
    (one,) = adapter.generate([chat("Count.", canvas=CANVAS)], config)
    (two,) = adapter.generate([chat("Count.", canvas=CANVAS + 1)], config)
    assert one.encoder_calls == 1 and len(one.token_ids) <= CANVAS  # the prompt only: one canvas, nothing after it
    assert two.encoder_calls == 2 and len(two.token_ids) <= CANVAS + 1  # two canvases, cut back to 17
    assert two.tokens_per_decoder_step * two.decoder_steps == pytest.approx(2 * CANVAS)  # transformers: whole canvases


class EosFrom(torch.nn.Module):
    """The checkpoint's head with end of sequence made certain from canvas position ``start`` on."""

    def __init__(self, head: torch.nn.Module, eos: int, start: int):
        super().__init__()
        self.head, self.eos, self.start = head, eos, start

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden)
        logits[:, self.start:, self.eos] += 1e4
        return logits


def test_output_is_cut_after_the_first_end_of_sequence_and_finished_rows_stop():
    adapter = load()  # its own network: the head is replaced
    config = adapter.make_config({"max_denoising_steps": STEPS}, seed=SEED)
    eos = adapter.tokenizer.convert_tokens_to_ids("<turn|>")
    adapter.network.lm_head = EosFrom(adapter.network.lm_head, eos, start=3)
    for gen in adapter.generate(REQUESTS, config):
        assert len(gen.token_ids) == 4 and gen.token_ids[-1] == eos and not gen.hit_max_tokens
        assert gen.gen_tokens == 4 and "<turn|>" not in gen.text
        assert gen.encoder_calls == 1  # every row ended in the first canvas: no second one is encoded or denoised


def test_rows_are_cut_to_the_request_then_after_the_first_eos():
    cfg = DiffusionGemmaOptions(max_new_tokens=20, eos_ids=(1, 106), pad_id=0)
    tokens = torch.full((3, 32), 7)
    tokens[0, 5], tokens[0, 6:] = 106, 0  # transformers pads after an end of sequence
    tokens[1, 25] = 1  # beyond the request's 20: truncated first, so no end of sequence
    rows = rows_from_output(tokens, torch.tensor([6 / 2, 32 / 8, 32 / 4]), cfg, PassCount(encoder=2, decoder=8), 9)
    assert [len(r.token_ids) for r in rows] == [6, 20, 20] and [r.hit_max_tokens for r in rows] == [False, True, True]
    assert [r.decoder_steps for r in rows] == [2, 8, 4] and all(r.nfe == 10 / 3 for r in rows)
    assert {(r.encoder_calls, r.decoder_calls, r.sampling_seed) for r in rows} == {(2, 8, 9)}
    validate_options(cfg)


def test_a_run_records_sampling_seeds_and_reruns_identically(tmp_path):
    from harness.cli import main

    def run(folder: str) -> tuple[dict, list[dict]]:
        status = main(["--models", "tiny-diffusiongemma", "--tasks", "gsm8k", "--data", "fixtures", "--limit", "3",
                       "--gen-length", "16", "--batch-size", "2", "--output", str(tmp_path / folder),
                       "--model-arg", "tiny-diffusiongemma.max_denoising_steps=2", "--no-progress"])
        assert status == 0
        result = json.loads((tmp_path / folder / "results.json").read_text())["results"][0]
        samples = [json.loads(line) for line in
                   (tmp_path / folder / "samples" / "tiny-diffusiongemma" / "gsm8k.jsonl").read_text().splitlines()]
        return result, samples

    (result, samples), (_, again) = run("a"), run("b")
    decoding = result["manifest"]["decoding"]
    assert decoding["do_sample"] is True and decoding["seed"] == result["manifest"]["seed"] == SEED
    assert not is_deterministic(decoding)  # the gate reads this model as sampled
    assert [s["token_ids"] for s in samples] == [s["token_ids"] for s in again]
    assert all(s["sampling_seed"] is not None and s["encoder_calls"] >= 1 for s in samples)
    assert sorted(s["batch_size"] for s in samples) == [1, 2, 2]  # the warm-up sample alone, then a batch of two
    primary = result["metrics"][result["primary_metric"]]
    assert primary["n"] == 3 and len(primary["ci95"]) == 2  # accuracy with its interval, as for every model
    assert result["speed"]["tokens_per_forward"] is not None and result["speed"]["per_token"]["forward_seconds"]
