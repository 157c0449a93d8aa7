"""GSM8K scoring on hand-made outputs: both filters, and lm-eval's exact_match options ($, commas, final period)."""

from __future__ import annotations

import pytest

from tasks.base import Doc
from tasks.gsm8k import GSM8K, INSTRUCTION

GOLD = "She buys 125 * 8 = <<125*8=1000>>1000 pencils.\n#### 1000"


def score(output: str, gold: str = GOLD):
    (result,) = GSM8K().score([Doc("0", {"question": "q", "answer": gold})], [output])
    return result


@pytest.mark.parametrize(
    "output, strict, flexible",
    [
        ("So she has 1000 pencils. The answer is 1000.", 1.0, 1.0),
        ("The answer is 1,000.", 1.0, 1.0),  # commas are ignored on both sides
        ("The answer is $1000.", 0.0, 1.0),  # strict regex wants a digit right after "is "
        ("The answer is 1000", 0.0, 1.0),  # strict regex needs one more character after the number
        ("The answer is 1000.\nQ: next", 1.0, 1.0),
        ("The answer is 1000. Check: 999 + 1", 1.0, 0.0),  # flexible takes the LAST number
        ("The answer is 100. Then 1000.", 0.0, 1.0),  # strict takes the FIRST match
        ("It costs $1,000.", 0.0, 1.0),  # "$" and the trailing period are ignored
        ("", 0.0, 0.0),
        ("no digits here", 0.0, 0.0),
    ],
)
def test_strict_and_flexible(output, strict, flexible):
    result = score(output)
    assert result.scores["exact_match,strict-match"] == strict
    assert result.scores["exact_match,flexible-extract"] == flexible
    assert result.target == "1000"


def test_negative_answers_and_diagnostics():
    result = score("It drops to -7 degrees. The answer is -7.", gold="5 - 12 = -7\n#### -7")
    assert result.scores == {"exact_match,strict-match": 1.0, "exact_match,flexible-extract": 1.0}
    empty = score("   ")
    assert empty.diagnostics == {"empty": True, "invalid": True}
    assert score("The answer is 3.").diagnostics == {"empty": False, "invalid": False}


def test_prompt_has_the_forks_literal_backslash_n_and_stops():
    prompt = GSM8K().prompt(Doc("0", {"question": "How many?", "answer": GOLD}))
    assert prompt.user == INSTRUCTION + "Q: How many?\nA:"
    assert '[result] is the answer you get.\\nQ: How many?\nA:' in prompt.user
    assert prompt.system is None and prompt.prefill is None
    assert prompt.stop == ("Q:", "</s>", "<|im_end|>")
