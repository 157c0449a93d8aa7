"""Every task's chat prompt on the released Qwen3 template: the adapter's string and ids equal those rendered here
independently, with jinja2 straight from the fetched tokenizer_config.json and ``tokenizers`` straight from the
fetched tokenizer.json, using the thinking switch each model runs with."""

from __future__ import annotations

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from harness.run.runner import to_request
from tasks.records import load_fixtures
from tasks.registry import PAPER_TASKS, make_task

THINKING = {"tiny-qwen3-realtok": False, "tiny-refusion-realtok": True}  # the switch each model runs with
DOCS_PER_TASK = 3


def reference_render(template: str, messages: list[dict], enable_thinking: bool) -> str:
    """The template as chat templates are rendered (trim_blocks, lstrip_blocks, sandboxed). A final assistant
    message is a prefill: the render stops right after its content."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    compiled = env.from_string(template)
    prefill = messages[-1]["content"] if messages[-1]["role"] == "assistant" else None
    text = compiled.render(messages=messages, add_generation_prompt=prefill is None, enable_thinking=enable_thinking)
    if prefill is None:
        return text
    return text[: text.rindex(prefill) + len(prefill)]


def task_requests(name: str) -> list:
    task = make_task(name)
    docs = task.docs(load_fixtures(task.dataset).records)[:DOCS_PER_TASK]
    return [to_request(task.prompt(doc), task.canvas_tokens) for doc in docs]


@pytest.fixture(scope="module")
def reference_tokenizer(qwen3_files) -> Tokenizer:
    return Tokenizer.from_file(str(qwen3_files / "tokenizer.json"))


@pytest.mark.parametrize("task", PAPER_TASKS)
@pytest.mark.parametrize("model", list(THINKING))
def test_prompt_string_and_ids_are_the_real_templates(model, task, realtok_adapters, qwen3_config,
                                                      reference_tokenizer):
    adapter = realtok_adapters[model]
    config = adapter.make_config()
    requests = task_requests(task)
    batch = adapter.prepare(requests, config)
    for row, request in enumerate(requests):
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        expected = reference_render(qwen3_config["chat_template"], messages, THINKING[model])
        assert batch.prompts[row] == expected
        expected_ids = reference_tokenizer.encode(expected, add_special_tokens=False).ids
        kept = batch.attention_mask[row].bool()
        assert batch.input_ids[row][kept].tolist() == expected_ids


@pytest.mark.parametrize("model", list(THINKING))
def test_the_thinking_switch_shows_where_the_assistant_turn_starts(model, realtok_adapters):
    """Qwen3 with thinking off gets the empty think block; ReFusion (on) ends at the bare assistant header. With a
    prefill the real template puts an empty think block before it for both."""
    adapter = realtok_adapters[model]
    config = adapter.make_config()
    assert config.template.enable_thinking is THINKING[model]
    plain = adapter.render(task_requests("gsm8k")[0], config)
    header = "<|im_start|>assistant\n"
    assert plain.endswith(header + ("" if THINKING[model] else "<think>\n\n</think>\n\n"))
    assert plain.count("<think>") == (0 if THINKING[model] else 1)
    prefilled = adapter.render(task_requests("arc_challenge")[0], config)
    assert prefilled.endswith(header + "<think>\n\n</think>\n\nThe best answer is")
    assert "<|im_end|>" not in prefilled.split(header)[-1]


def test_refusion_tokenizer_has_the_two_added_special_tokens(realtok_adapters):
    qwen3 = realtok_adapters["tiny-qwen3-realtok"].tokenizer
    refusion = realtok_adapters["tiny-refusion-realtok"].tokenizer
    assert len(qwen3) == 151669 and len(refusion) == 151671
    assert refusion.convert_tokens_to_ids(["<|beginoftext|>", "<|mask|>"]) == [151669, 151670]
    assert refusion("a<|mask|>b<|beginoftext|>", add_special_tokens=False)["input_ids"] == [64, 151670, 65, 151669]
    assert refusion.decode([64, 151670, 65], skip_special_tokens=True) == "ab"
    assert qwen3.convert_tokens_to_ids("<|mask|>") is None
    text = "Q: 2+2?\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert refusion(text)["input_ids"] == qwen3(text)["input_ids"]  # the same ids elsewhere, and no BOS added
    refusion_net = realtok_adapters["tiny-refusion-realtok"].network.config
    assert (refusion_net.vocab_size, refusion_net.bos_token_id, refusion_net.mask_token_id) == (151671, 151669, 151670)
    assert realtok_adapters["tiny-qwen3-realtok"].network.config.vocab_size == 151936
