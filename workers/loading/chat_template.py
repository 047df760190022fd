"""Chat-template variables: the extra keyword arguments a chat template is rendered with (Hugging Face's
`apply_chat_template(messages, **kwargs)`), e.g. `{"reasoning_effort": "medium"}` for GPT-OSS or
`{"enable_thinking": false}` for Qwen3.

One value (`ChatTemplateKwargs`) carries them everywhere they matter: our engine's own rendering of chat prompts
(`render_chat`, used by tokenizer.encode_chat), an endpoint's chat requests (`chat_template_kwargs`, the field vLLM,
SGLang and trtllm-serve take), a run's manifest and identity (its canonical JSON). They belong to the prompt, not to
`SamplingParams`: they change which tokens the model is given, never how the next token is drawn.

A template silently ignores a variable it does not read, so a misspelt name (`reasoning_efort`) would change nothing
and say nothing; `unread_kwargs` names the ones a model's template never reads, for the run to print.
"""

from __future__ import annotations

import json
import keyword
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import UserError

MAX_JSON_CHARS = 16_384  # far more than any template switch needs; a pasted file is a mistake
# Names apply_chat_template (or the template's own context) already binds: as a kwarg they would replace the
# conversation, the generation prompt or a special token, or collide with a parameter (TypeError).
RESERVED = frozenset(
    {
        "messages",
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
        "bos_token",
        "eos_token",
        "unk_token",
        "pad_token",
    }
)


@dataclass(frozen=True)
class ChatTemplateKwargs:
    """A validated JSON object of template variables, kept as its canonical JSON text (sorted keys, no spaces), so
    the value is hashable, compares by content and reads the same in a manifest, a run key and a request."""

    json: str = "{}"

    @classmethod
    def parse(cls, text: str, what: str = "--chat-template-kwargs") -> ChatTemplateKwargs:
        """From the command line: a JSON object, e.g. '{"reasoning_effort": "medium"}'. UserError in one line."""
        if len(text) > MAX_JSON_CHARS:
            raise UserError(f"{what}: {len(text)} characters; at most {MAX_JSON_CHARS}")
        try:
            value = json.loads(text, parse_constant=_refuse_constant)
        except json.JSONDecodeError as e:
            raise UserError(
                f'{what}: not JSON ({e.msg} at column {e.colno}); e.g. \'{{"reasoning_effort": "medium"}}\''
            ) from None
        except RecursionError:
            raise UserError(f"{what}: nested too deeply") from None
        except ValueError as e:  # a NaN / Infinity constant
            raise UserError(f"{what}: {e}") from None
        if not isinstance(value, dict):  # `of` reads None as "none given"; typed here, null is a mistake
            raise UserError(f'{what}: must be a JSON object ({{"name": value, ...}}), got {json.dumps(value)[:40]}')
        return cls.of(value, what)

    @classmethod
    def of(cls, value: Any, what: str = "chat template kwargs") -> ChatTemplateKwargs:
        """From a mapping already read (a references file, a manifest)."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise UserError(f'{what}: must be a JSON object ({{"name": value, ...}}), got {type(value).__name__}')
        for key in value:
            if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
                raise UserError(f"{what}: {key!r} is not a template variable name (letters, digits and _)")
            if key in RESERVED:
                raise UserError(f"{what}: {key!r} is set by the chat template call itself; it cannot be a kwarg")
        try:
            text = json.dumps(dict(value), sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            raise UserError(
                f"{what}: values must be JSON (strings, numbers, booleans, null, lists, objects): {e}"
            ) from None
        return cls(text)

    def as_dict(self) -> dict[str, Any]:
        """A fresh copy (a request payload may be changed by whoever sends it)."""
        return json.loads(self.json)

    def __bool__(self) -> bool:
        return self.json != "{}"

    def __str__(self) -> str:
        return self.json


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def render_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    template_kwargs: ChatTemplateKwargs | None = None,
) -> str:
    """A conversation as text through the model's chat template, with the template variables given. With
    add_generation_prompt False the last message is continued rather than answered (lm-eval's convention for a
    prompt that ends in an assistant prefix)."""
    if not getattr(tokenizer, "chat_template", None):
        raise UserError("this model's tokenizer has no chat template; use plain prompts instead of chat messages")
    extra = template_kwargs.as_dict() if template_kwargs else {}
    if not add_generation_prompt:
        extra["continue_final_message"] = True
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=add_generation_prompt, tokenize=False, **extra
    )
    return str(text)


def template_variables(tokenizer: Any) -> frozenset[str]:
    """The names the model's chat template reads that its context does not define itself (Jinja's undeclared
    variables): the variables a kwarg can set. Empty when there is no template."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return frozenset()
    from jinja2 import meta
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"])
    return frozenset(meta.find_undeclared_variables(env.parse(template)))


def unread_kwargs(tokenizer: Any, template_kwargs: ChatTemplateKwargs | None) -> list[str]:
    """The kwargs the model's chat template never reads (in key order): they change nothing in its prompts."""
    if not template_kwargs:
        return []
    read = template_variables(tokenizer)
    return [key for key in template_kwargs.as_dict() if key not in read]
