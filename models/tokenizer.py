"""Byte-level BPE tokenizers built locally, for the offline tiny models.

They carry the real models' special tokens and chat-template markers, so prompts are rendered exactly as for the
real checkpoints (only the ids differ). Training is deterministic and takes a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

# A small, fixed training text: English, arithmetic, LaTeX and Python, so that typical prompts encode compactly.
_CORPUS = [
    "Solve the following math problem. You need to think step-by-step, show your detailed reasoning.",
    "Question: Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "The answer is 72. The best answer is A. The answer is (B). Answer: Let's think step by step.",
    "Given the following question and four candidate answers (A, B, C and D), choose the best answer.",
    "The following are multiple choice questions (with answers) about computer science.",
    "Problem: Find the value of $x$ such that $\\frac{x}{2} + 3 = 7$. Solution: $x = \\boxed{8}$.",
    "Write a solution to the following problem and make sure that it passes the tests:",
    "You are an expert Python programmer. Your code should pass these tests: [BEGIN] [DONE]",
    "def add(a: int, b: int) -> int:\n    \"\"\"Return the sum.\"\"\"\n    return a + b\n",
    "from typing import List\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n",
    "    for i, x in enumerate(numbers):\n        if abs(x - y) < threshold:\n            return True\n",
    "assert add(2, 3) == 5\nimport math\nclass Solution:\n    pass\n",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 3.14 -5 $18 1,000 #### 42",
    "Choices:\n(A) first\n(B) second\n(C) third\n(D) fourth\nAnswer:",
]


@dataclass(frozen=True)
class TokenizerSpec:
    """What a locally built tokenizer needs: its special tokens (in id order), roles of some, and a chat template."""

    special_tokens: tuple[str, ...]
    eos_token: str
    pad_token: str
    chat_template: str
    mask_token: str | None = None
    bos_token: str | None = None
    vocab_size: int = 512


def build_tokenizer(spec: TokenizerSpec) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on the fixed corpus and wrap it for transformers."""
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(spec.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_CORPUS, trainer)
    named = {spec.eos_token, spec.pad_token, spec.mask_token, spec.bos_token}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        mask_token=spec.mask_token,
        bos_token=spec.bos_token,
        additional_special_tokens=[t for t in spec.special_tokens if t not in named],
    )
    tokenizer.chat_template = spec.chat_template
    return tokenizer


# Qwen3-style template: <|im_start|>role\n...<|im_end|>. With thinking off the generation prompt carries an empty
# think block; a final assistant message (a prefill) is always preceded by one, as in the real template.
QWEN3_CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' and loop.last %}"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n{{ m['content'] }}<|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)

QWEN3_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")

QWEN3_TOKENIZER = TokenizerSpec(
    special_tokens=QWEN3_SPECIALS,
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    chat_template=QWEN3_CHAT_TEMPLATE,
)

# ReFusion adds <|beginoftext|> and <|mask|> to the Qwen3 tokenizer (docs/decoders.md §1).
REFUSION_TOKENIZER = TokenizerSpec(
    special_tokens=QWEN3_SPECIALS + ("<|beginoftext|>", "<|mask|>"),
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    mask_token="<|mask|>",
    bos_token="<|beginoftext|>",
    chat_template=QWEN3_CHAT_TEMPLATE,
)

# LLaDA-8B-Instruct: Llama-3 style headers, the template itself starts with <|startoftext|> (docs/decoders.md §2).
LLADA_CHAT_TEMPLATE = (
    "<|startoftext|>"
    "{% for m in messages %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}"
    "{% if not (m['role'] == 'assistant' and loop.last) %}<|eot_id|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

LLADA_TOKENIZER = TokenizerSpec(
    special_tokens=("<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                    "<|mdm_mask|>"),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    mask_token="<|mdm_mask|>",
    bos_token="<|startoftext|>",
    chat_template=LLADA_CHAT_TEMPLATE,
)


def qwen25_chat_template(default_system: str, close_final_assistant: bool) -> str:
    """Qwen2.5's ChatML template: a default system turn unless the chat has one, then <|im_start|>role\n...<|im_end|>.
    Without ``close_final_assistant`` a final assistant message is left open (a prefill), as Dream's template does."""
    close = "<|im_end|>\n" if close_final_assistant else (
        "{% if not (m['role'] == 'assistant' and loop.last) %}<|im_end|>\n{% endif %}")
    return (
        "{% if messages[0]['role'] != 'system' %}<|im_start|>system\n" + default_system + "<|im_end|>\n{% endif %}"
        "{% for m in messages %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        + close +
        "{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


# Dream-v0-Instruct: Qwen2.5 template with the default system prompt (docs/decoders.md §3).
DREAM_CHAT_TEMPLATE = qwen25_chat_template("You are a helpful assistant.", close_final_assistant=False)

DREAM_TOKENIZER = TokenizerSpec(
    special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    mask_token="<|mask|>",
    chat_template=DREAM_CHAT_TEMPLATE,
)

# SDAR / TraDo: Qwen3's tokenizer and template with <|MASK|> added after </think> (id 151669 in the release, the last
# special here); generation ends at <|endoftext|>, a chat turn at <|im_end|>.
SDAR_TOKENIZER = TokenizerSpec(
    special_tokens=QWEN3_SPECIALS + ("<|MASK|>",),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    mask_token="<|MASK|>",
    chat_template=QWEN3_CHAT_TEMPLATE,
)

# Fast-dLLM v2: Qwen2.5-Instruct's tokenizer and template with |<MASK>| added after its specials (id 151665 in the
# release); eos is <|im_end|>, the tokenizer's pad <|endoftext|> (its special_tokens_map; only config.json says 151645).
FASTDLLM_V2_TOKENIZER = TokenizerSpec(
    special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "|<MASK>|"),
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    mask_token="|<MASK>|",
    chat_template=qwen25_chat_template("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
                                       close_final_assistant=True),
)

# DiffusionGemma (Gemma 4's tokenizer and template): <|turn>role\n...<turn|>\n with the assistant as "model", a
# leading <bos>; with thinking on, a system turn opens with <|think|>; with it off, the generation prompt carries an
# empty thought channel. The specials in the release's order: <pad> 0, <eos> 1, <bos> 2 (their released ids too),
# then <unk>, <mask>, <|tool_response>, <|think|>, <|channel>, <channel|>, <|turn>, <turn|>.
GEMMA4_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set thinking = enable_thinking is defined and enable_thinking %}"
    "{% set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else none %}"
    "{% if thinking or system is not none %}"
    "<|turn>system\n{% if thinking %}<|think|>\n{% endif %}{{ (system or '') | trim }}<turn|>\n"
    "{% endif %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "<|turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n{{ m['content'] | trim }}<turn|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% if not thinking %}<|channel>thought\n<channel|>{% endif %}"
    "{% endif %}"
)

GEMMA4_TOKENIZER = TokenizerSpec(
    special_tokens=("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|tool_response>", "<|think|>", "<|channel>",
                    "<channel|>", "<|turn>", "<turn|>"),
    eos_token="<eos>",
    pad_token="<pad>",
    mask_token="<mask>",
    bos_token="<bos>",
    chat_template=GEMMA4_CHAT_TEMPLATE,
)

# LLaDA2 (Ling 2.0's tokenizer): <|endoftext|> ends the text (156892 in the release, the published generate's
# eos_id), <|mask|> is the mask (156895), a turn ends at <|role_end|>. The template: role tags around each turn, a
# default system turn "detailed thinking off", the generation prompt <role>ASSISTANT</role>.
LLADA2_CHAT_TEMPLATE = (
    "{%- if not messages or messages[0]['role'] != 'system' -%}"
    "<role>SYSTEM</role>detailed thinking off<|role_end|>{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set role = {'system': 'SYSTEM', 'user': 'HUMAN', 'assistant': 'ASSISTANT'}[message['role']] -%}"
    "<role>{{ role }}</role>{{ message['content'] }}"
    "{%- if not (loop.last and message['role'] == 'assistant') -%}<|role_end|>{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<role>ASSISTANT</role>{%- endif -%}"
)

LLADA2_TOKENIZER = TokenizerSpec(
    special_tokens=("<|startoftext|>", "<|endoftext|>", "<|role_end|>", "<|mask|>"),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    mask_token="<|mask|>",
    bos_token="<|startoftext|>",
    chat_template=LLADA2_CHAT_TEMPLATE,
)
