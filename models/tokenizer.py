"""Byte-level BPE tokenizers built locally, for the offline tiny models, and the chat templates several families share.

Each family's ``TokenizerSpec`` (models/families/) carries the real model's special tokens and chat-template markers,
so prompts are rendered exactly as for the real checkpoints (only the ids differ). Training is deterministic and takes
a few milliseconds.
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
