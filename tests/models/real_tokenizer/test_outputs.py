"""What becomes of an output on the released tokenizer: the decoders stop at the real end-of-sequence ids, ``finish``
strips the special tokens and applies the task's stop strings, and ``gen_tokens`` counts the committed ids up to and
including the first end-of-sequence id. The outputs are scripted by nudging the tiny network's own logits, so the
real decoders, the real cache and the real tokenizer run; only the answer is fixed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.run.runner import to_request
from models.decoders.ar import ar_generate
from models.networks.hf_causal import TransformersCausalLM
from models.decoders.refusion.decoder import refusion_generate
from models.options import set_options
from refusion_stubs import NudgedLM
from tasks.records import load_fixtures
from tasks.registry import make_task

IM_END, END_OF_TEXT, MASK = 151645, 151643, 151670
THOUGHT = "<think>\nTwo plus three is five.\n</think>\n\n"
ANSWER = "The answer is 5."
STRENGTH = 1e4  # far above the random network's logits: the scripted token always wins, with confidence ~1


def gsm8k_request(canvas: int):
    task = make_task("gsm8k")
    doc = task.docs(load_fixtures(task.dataset).records)[0]
    return to_request(task.prompt(doc), canvas)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def decoder_config(adapter, batch):
    """The decoder config as ``adapter.decode`` runs it: the batch's canvas plus the checkpoint's token ids."""
    return set_options(batch.config.decoder, adapter.token_ids(), adapter.name, adapter_fields=True)


def test_qwen3_eos_ids_are_the_real_generation_configs(realtok_adapters):
    adapter = realtok_adapters["tiny-qwen3-realtok"]
    written = json.loads((Path(adapter.source.path) / "generation_config.json").read_text())
    assert written["eos_token_id"] == [IM_END, END_OF_TEXT]
    assert adapter.eos_ids() == [IM_END, END_OF_TEXT]
    assert adapter.tokenizer.convert_ids_to_tokens([IM_END, END_OF_TEXT]) == ["<|im_end|>", "<|endoftext|>"]
    assert adapter.pad_id() == END_OF_TEXT


@pytest.mark.parametrize("first_eos, second_eos", [(IM_END, END_OF_TEXT), (END_OF_TEXT, IM_END)])
def test_qwen3_output_is_cut_at_either_eos_stripped_and_counted(first_eos, second_eos, realtok_adapters):
    adapter = realtok_adapters["tiny-qwen3-realtok"]
    tok = adapter.tokenizer
    before = encode(tok, THOUGHT + ANSWER)
    script = before + [first_eos] + encode(tok, "\nQ: What is 3+3?\nA:") + [second_eos] + encode(tok, " 6")
    batch = adapter.prepare([gsm8k_request(len(script))], adapter.make_config())
    prompt = batch.input_ids[0].tolist()
    network = NudgedLM(adapter.network, MASK, prompt + script, STRENGTH)
    cfg = decoder_config(adapter, batch)
    assert (cfg.max_new_tokens, cfg.eos_ids, cfg.pad_id, cfg.do_sample) == (len(script), (IM_END, END_OF_TEXT),
                                                                           END_OF_TEXT, False)
    results = ar_generate(TransformersCausalLM(network), batch.input_ids, batch.attention_mask, cfg).rows
    generation = adapter.finish(batch, results)[0]

    assert generation.token_ids == before + [first_eos]
    assert generation.gen_tokens == len(before) + 1  # up to and including the first end-of-sequence id
    assert results[0].nfe == len(before) + 1  # prefill + one forward per token after the first
    assert not generation.hit_max_tokens
    assert generation.raw_text == THOUGHT + ANSWER + tok.convert_ids_to_tokens(first_eos)
    # <think> and </think> are added tokens but not special ones in the released tokenizer, so they stay in the text.
    assert generation.text == THOUGHT + ANSWER
    assert generation.gen_tokens_after_stop == len(before)


def test_qwen3_stop_string_cuts_the_text_but_not_the_count(realtok_adapters):
    adapter = realtok_adapters["tiny-qwen3-realtok"]
    tok = adapter.tokenizer
    kept = encode(tok, ANSWER + "\n\n")
    script = kept + encode(tok, "Q: What is 3+3?") + [IM_END]
    batch = adapter.prepare([gsm8k_request(len(script) + 8)], adapter.make_config())
    network = NudgedLM(adapter.network, MASK, batch.input_ids[0].tolist() + script + [IM_END] * 8, STRENGTH)
    cfg = decoder_config(adapter, batch)
    assert cfg.max_new_tokens == len(script) + 8
    results = ar_generate(TransformersCausalLM(network), batch.input_ids, batch.attention_mask, cfg).rows
    generation = adapter.finish(batch, results)[0]
    assert generation.gen_tokens == len(script)
    assert generation.text == ANSWER + "\n\n"  # gsm8k stops at "Q:"
    assert generation.gen_tokens_after_stop == len(kept)


def test_refusion_output_is_cut_at_the_tokenizers_eos_only(realtok_adapters):
    """ReFusion ends at tokenizer.eos_token_id (<|im_end|>), as its eval does: an <|endoftext|> before it is committed,
    counted and stripped from the text; what follows <|im_end|> is dropped."""
    adapter = realtok_adapters["tiny-refusion-realtok"]
    tok = adapter.tokenizer
    assert adapter.eos_ids() == [IM_END]
    before = encode(tok, THOUGHT + ANSWER) + [END_OF_TEXT] + encode(tok, " ok")
    after = encode(tok, "\nQ: What is 3+3?")
    config = adapter.make_config()
    canvas = 16 * (1 + (len(before) + 1 + len(after)) // 16)  # whole slots in both serial blocks
    script = (before + [IM_END] + after + [END_OF_TEXT] * canvas)[:canvas]
    batch = adapter.prepare([gsm8k_request(canvas)], config)
    prompt = batch.input_ids[0].tolist()
    network = NudgedLM(adapter.network, MASK, prompt + script, STRENGTH)
    cfg = decoder_config(adapter, batch)
    assert (cfg.gen_length, cfg.mask_id, cfg.eos_id) == (canvas, MASK, IM_END)
    results = refusion_generate(network, batch.input_ids, batch.attention_mask, cfg).rows
    generation = adapter.finish(batch, results)[0]

    assert generation.token_ids == before + [IM_END]
    assert generation.gen_tokens == len(before) + 1
    assert generation.raw_text == THOUGHT + ANSWER + "<|endoftext|> ok<|im_end|>"
    assert generation.text == THOUGHT + ANSWER + " ok"
    assert generation.gen_tokens_after_stop == len(encode(tok, THOUGHT + ANSWER + " ok"))


def test_qwen3_native_greedy_equals_transformers_generate_on_the_released_tokenizer(realtok_adapters):
    """The AR baseline on its default (native) network, through the adapter, against transformers' own generate on
    the same left-padded batch of eight chat prompts: the same tokens, each row cut at its first end of sequence."""
    adapter = realtok_adapters["tiny-qwen3-realtok"]
    task = make_task("gsm8k")
    docs = task.docs(load_fixtures(task.dataset).records)
    prompts = [task.prompt(docs[i % len(docs)]) for i in range(8)]
    # eight different prompts: the fixture questions, the later ones with an extra turn of words
    requests = [to_request(dataclasses.replace(p, user=p.user + " Think." * i), 12) for i, p in enumerate(prompts)]
    config = adapter.make_config()
    assert adapter.network_implementation(config.runtime) == "native"
    batch = adapter.prepare(requests, config)
    ours = [g.token_ids for g in adapter.finish(batch, adapter.decode(batch))]
    out = adapter.network.generate(input_ids=batch.input_ids, attention_mask=batch.attention_mask, do_sample=False,
                                   max_new_tokens=12, eos_token_id=[IM_END, END_OF_TEXT], pad_token_id=END_OF_TEXT)
    theirs = [next((row[:k + 1] for k, t in enumerate(row) if t in (IM_END, END_OF_TEXT)), row)
              for row in out[:, batch.input_ids.shape[1]:].tolist()]
    assert ours == theirs
