"""The two lm-eval filters whose 0.4.9.1 behaviour (the ReFusion fork's) differs from the installed 0.4.13.

The paper's numbers were scored by 0.4.9.1, so these reproduce it (docs/tasks.md):

* ``remove_whitespace`` stripped only the left side; 0.4.13 strips both (" C " scores 0 in the fork, 1 in 0.4.13).
* ``multi_choice_regex``'s choice-text fallback joined the choices into one alternation in choice order, so at each
  position the first listed choice that matches wins ("sp" beats "sp2"); 0.4.13 sorts the branches longest first.

Everything else comes from lm-eval's own classes.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import lru_cache
from typing import Any, Iterable, Sequence

from lm_eval.api.filter import Filter
from lm_eval.filters.extraction import RegexFilter


class LeftStripFilter(Filter):
    """0.4.9.1's ``remove_whitespace``: ``lstrip`` only."""

    def apply(self, resps: Iterable[Sequence[str]], docs: Sequence[dict[str, Any]]) -> list[list[str]]:
        return [[resp.lstrip() for resp in inst] for inst in resps]


@lru_cache(maxsize=1)
def _punctuation_table() -> dict[int, None]:
    """Every Unicode punctuation code point, as 0.4.9.1's filter deletes them (built once: it takes ~0.3 s)."""
    return dict.fromkeys(i for i in range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P"))


class FirstChoiceRegexFilter(RegexFilter):
    """0.4.9.1's ``multi_choice_regex``: the regex, then the choice texts (in choice order), then ``:\\s*X``.

    Needs ``doc["choices"]``. The choice-text fallback searches the response after the same case/punctuation
    folding as the choices, and maps the matched text to ``(X)``.
    """

    def __init__(self, regex_pattern: str, group_select: int = 0, fallback: str = "[invalid]",
                 ignore_case: bool = False, ignore_punctuation: bool = False,
                 regexes_to_ignore: Sequence[str] | None = None) -> None:
        super().__init__(regex_pattern, group_select, fallback)
        self.ignore_case = ignore_case
        self.ignore_punctuation = ignore_punctuation
        self.regexes_to_ignore = tuple(regexes_to_ignore or ())

    def _fold(self, text: str) -> str:
        for pattern in self.regexes_to_ignore:
            text = re.sub(pattern, "", text)
        if self.ignore_case:
            text = text.lower()
        if self.ignore_punctuation:
            text = text.translate(_punctuation_table())
        return text

    def _find(self, regex: re.Pattern[str], text: str, convert: dict[str, str]) -> str:
        found = regex.findall(text)
        if not found:
            return ""
        match = found[self.group_select]
        if isinstance(match, tuple):
            match = [m for m in match if m][0]
        match = match.strip()
        return convert.get(match, match) if match else match

    def extract(self, response: str, choices: Sequence[str]) -> str:
        letters = [chr(ord("A") + i) for i in range(len(choices))]
        folded = [self._fold(c.strip()) for c in choices]
        text_to_letter = {text: f"({letter})" for text, letter in zip(folded, letters)}
        by_text = re.compile("|".join(re.escape(text) for text in folded))
        by_colon = re.compile(rf":[\s]*({'|'.join(letters)})")
        return (self._find(self.regex, response, {})
                or self._find(by_text, self._fold(response), text_to_letter)
                or self._find(by_colon, response, {letter: f"({letter})" for letter in letters})
                or self.fallback)

    def apply(self, resps: Iterable[Sequence[str]], docs: Sequence[dict[str, Any]]) -> list[list[str]]:
        return [[self.extract(resp, doc["choices"]) for resp in inst] for inst, doc in zip(resps, docs)]
