"""Generation kwargs with lm-eval's `--gen_kwargs` syntax and meaning: `temperature=1.0,top_p=1.0[,top_k=..,seed=..,
max_gen_toks=..]`, checked key by key and applied on top of a task's YAML `generation_kwargs`.

**Syntax** (lm-eval's `simple_parse_args_string`): `key=value` pairs separated by commas, empty items skipped. Unlike
lm-eval, a key it would take and our engine cannot honour is refused instead of passed along: the known keys are
`temperature`, `top_p`, `top_k`, `seed`, `do_sample` and `max_gen_toks` (also spelled `max_new_tokens`, `max_tokens`,
`max_completion_tokens`, lm-eval's aliases). A key given twice, under any spelling, is refused too (lm-eval keeps the
last silently). Values: temperature a finite number >= 0 (0: greedy; below 1e-5 refused, since it decodes greedily);
top_p in (0, 1]; top_k a whole number >= 0 (0: off); seed a whole number in [0, 2^63); max_gen_toks a whole number
>= 1; do_sample true or false.

**Meaning** (lm-eval 0.4.13: `evaluator.simple_evaluate` updates each task's `generation_kwargs` with these, then
`models.utils.normalize_gen_kwargs` decides greedy or sampled): `do_sample` false forces temperature 0 (greedy)
whatever temperature says; `do_sample` absent means sampled iff temperature > 0. Because the update keeps the YAML's
own `do_sample: false` (GSM8K and GPQA have it), lm-eval run as `--gen_kwargs temperature=1.0` decodes *greedily*,
with a warning. Here a temperature given without `do_sample` carries its own: temperature > 0 sets do_sample true,
temperature 0 sets it false, so the kwargs mean what they say. Contradictions are refused in one line:
`do_sample=false` with temperature > 0, and `do_sample=true` with an effective temperature of 0 (lm-eval warns and
its backends disagree: Hugging Face refuses, vLLM decodes greedily).

`seed`: lm-eval hands it to the backend as one seed for every request; here it is the base from which each sample's
own seed is derived (`repeats.sample_seed`), so that the samples of a run do not all share one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from ...workers.config import GREEDY_BELOW

KNOWN_KEYS = ("temperature", "top_p", "top_k", "seed", "do_sample", "max_gen_toks")
# lm-eval's spellings of the output limit (lm_eval.models.utils.normalize_gen_kwargs), canonical first
MAX_TOKEN_ALIASES = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
MAX_SEED = 2**63
MAX_TOKENS = 2**31 - 1
EXAMPLE = "e.g. --gen-kwargs temperature=1.0,top_p=1.0"


@dataclass(frozen=True)
class GenKwargs:
    """Generation kwargs as given, validated, in canonical spelling and given order. Hashable; `str` gives the
    `key=value,...` form back. Empty: the task's own kwargs unchanged."""

    items: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, text: str | None, what: str = "--gen-kwargs") -> GenKwargs:
        """From lm-eval's syntax. UserError in one line naming the item."""
        if text is None or not text.strip():
            return cls()
        pairs: list[tuple[str, Any]] = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            if "=" not in item:
                raise UserError(f"{what}: {item!r} is not key=value; {EXAMPLE}")
            key, raw = (s.strip() for s in item.split("=", 1))
            pairs.append((key, _from_text(_canonical(key, what), raw, what)))
        return cls.of(pairs, what)

    @classmethod
    def of(cls, pairs: Mapping[str, Any] | list[tuple[str, Any]], what: str = "generation kwargs") -> GenKwargs:
        """From values already typed (a task spec, a references file, a manifest)."""
        seen: dict[str, Any] = {}
        for key, value in pairs.items() if isinstance(pairs, Mapping) else pairs:
            name = _canonical(key, what)
            if name in seen:
                spelled = "" if name == key else f" (as {key})"
                raise UserError(f"{what}: {name} given twice{spelled}")
            seen[name] = _checked(name, value, what)
        return cls(tuple(seen.items()))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.items)

    def get(self, key: str, default: Any = None) -> Any:
        return self.as_dict().get(key, default)

    def over(self, base: GenKwargs) -> GenKwargs:
        """These kwargs layered on `base` (a task's own): a key given here wins."""
        merged = {**base.as_dict(), **self.as_dict()}
        return GenKwargs(tuple(merged.items()))

    def apply(self, task_kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The task's YAML `generation_kwargs` with these applied, as the task's YAML then states them (a YAML's
        `generation_kwargs` replace the included ones whole, so every key is written). See the module docstring for
        the rules; raises UserError on a contradiction."""
        given = self.as_dict()
        if "temperature" in given and "do_sample" not in given:
            given["do_sample"] = given["temperature"] > 0
        merged = {k: v for k, v in task_kwargs.items() if k not in MAX_TOKEN_ALIASES or "max_gen_toks" not in given}
        merged.update(given)
        temperature = float(merged.get("temperature") or 0.0)
        if merged.get("do_sample") is False and temperature > 0 and "temperature" in given:
            raise UserError(
                f"--gen-kwargs: do_sample=false decodes greedily, so temperature={temperature:g} would be "
                "ignored; drop one of them"
            )
        if merged.get("do_sample") is True and temperature == 0:
            raise UserError(f"--gen-kwargs: do_sample=true needs a temperature > 0 (the task's is 0); {EXAMPLE}")
        return merged

    def __bool__(self) -> bool:
        return bool(self.items)

    def __str__(self) -> str:
        return ",".join(f"{k}={_text(v)}" for k, v in self.items)


def _canonical(key: str, what: str) -> str:
    if key in MAX_TOKEN_ALIASES:
        return "max_gen_toks"
    if key not in KNOWN_KEYS:
        known = ", ".join(KNOWN_KEYS[:-1] + MAX_TOKEN_ALIASES)
        raise UserError(f"{what}: unknown key {key!r}; known: {known}")
    return key


def _from_text(key: str, raw: str, what: str) -> Any:
    """A value as typed on the command line, by the key's type (no guessing, as lm-eval's handle_arg_string does)."""
    if key == "do_sample":
        if raw.lower() not in ("true", "false"):
            raise UserError(f"{what}: do_sample={raw!r}: expected true or false")
        return raw.lower() == "true"
    if key in ("temperature", "top_p"):
        try:
            return float(raw)
        except ValueError:
            raise UserError(f"{what}: {key}={raw!r}: expected a number") from None
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"{what}: {key}={raw!r}: expected a whole number") from None


def _checked(key: str, value: Any, what: str) -> Any:
    """The value in its key's type and range, or UserError naming both."""
    shown = f"{what}: {key}={_text(value)}"
    if key == "do_sample":
        if not isinstance(value, bool):
            raise UserError(f"{shown}: expected true or false")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{shown}: expected a number")
    if key in ("temperature", "top_p"):
        value = float(value)
        if not math.isfinite(value):
            raise UserError(f"{shown}: must be a finite number")
        if key == "temperature":
            if value < 0:
                raise UserError(f"{shown}: must be >= 0 (0 decodes greedily)")
            if 0 < value < GREEDY_BELOW:
                raise UserError(f"{shown}: below {GREEDY_BELOW:g} decodes greedily; say temperature=0")
        elif not 0.0 < value <= 1.0:
            raise UserError(f"{shown}: must be in (0, 1] (1 keeps every token)")
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise UserError(f"{shown}: expected a whole number")
        value = int(value)
    low, high, hint = {
        "top_k": (0, MAX_TOKENS, " (0 turns top-k off)"),
        "seed": (0, MAX_SEED - 1, ""),
        "max_gen_toks": (1, MAX_TOKENS, ""),
    }[key]
    if not low <= value <= high:
        raise UserError(f"{shown}: must be in [{low}, {high}]{hint}")
    return value


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, float) else str(value)
