"""GSM8K answer extraction and scoring with lm-eval's `gsm8k` semantics (task version 3.0), written out so a
run's per-sample record does not depend on lm-eval's internal sample layout. A test checks these against
lm-eval's own filters and metric on many crafted outputs.

  strict-match:      the number after "#### "                       -> first match of  #### (-?[0-9.,]+)
  flexible-extract:  the last number-looking token in the output    -> last match of   (-?[$0-9.,]{2,})|(-?[0-9]+)
  exact_match:       on both sides remove ",", "$", everything up to "#### ", a trailing "."; lower-case; compare
"""

from __future__ import annotations

import re

INVALID = "[invalid]"
FILTERS = ("strict-match", "flexible-extract")
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORE = [re.compile(p) for p in (",", r"\$", r"(?s).*#### ", r"\.$")]


def _pick(matches: list, index: int) -> str:
    if not matches:
        return INVALID
    match = matches[index]
    if isinstance(match, tuple):  # several groups: the first one that matched
        match = next((m for m in match if m), match[0])
    return match.strip()


def extract(output: str, filter_name: str) -> str:
    if filter_name == "strict-match":
        return _pick(_STRICT.findall(output), 0)
    if filter_name == "flexible-extract":
        return _pick(_FLEXIBLE.findall(output), -1)
    raise ValueError(f"unknown GSM8K filter {filter_name!r}; known: {', '.join(FILTERS)}")


def normalise(text: str) -> str:
    for pattern in _IGNORE:
        text = pattern.sub("", text)
    return text.lower()


def is_correct(extracted: str, reference_answer: str) -> bool:
    """reference_answer is the dataset's full worked solution ending in '#### <number>'."""
    return normalise(extracted) == normalise(reference_answer)


def final_answer(reference_answer: str) -> str:
    return normalise(reference_answer)
