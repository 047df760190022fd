"""Prompt encoding and stop tokens, the same way for every checkpoint kind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .chat_template import ChatTemplateKwargs, render_chat
from .model_config import ModelConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# End-of-turn markers of common chat formats. A chat model ends its answer with one of these, which is not
# always the tokenizer's eos_token (Llama 3: <|eot_id|>; Qwen: <|im_end|> vs <|endoftext|>).
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, add_bos: bool | None = None) -> list[int]:
    """Token ids of a plain prompt.

    add_bos None follows the tokenizer's own habit (Llama adds <s>, SmolLM2 and Qwen add nothing); True or
    False forces it. A prompt whose text already starts with the BOS string never gets a second one.
    """
    bos = tokenizer.bos_token_id
    if add_bos is None:
        ids = list(tokenizer.encode(prompt, add_special_tokens=True))
    else:
        ids = list(tokenizer.encode(prompt, add_special_tokens=False))
        if add_bos and bos is not None and ids[:1] != [bos]:
            ids.insert(0, bos)
    if bos is not None and ids[:2] == [bos, bos]:
        ids.pop(0)
    return ids


def encode_any(
    tokenizer: PreTrainedTokenizerBase, prompt: Any, template_kwargs: ChatTemplateKwargs | None = None
) -> list[int]:
    """A prompt as token ids: raw text, chat messages ([{"role", "content"}, ...]) or token ids already.
    template_kwargs: the chat template's extra variables (chat messages only)."""
    if isinstance(prompt, str):
        return encode_prompt(tokenizer, prompt)
    if prompt and isinstance(prompt[0], dict):
        return encode_chat(tokenizer, prompt, template_kwargs)
    return [int(t) for t in prompt]


def encode_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, Any]],
    template_kwargs: ChatTemplateKwargs | None = None,
) -> list[int]:
    """Token ids of a conversation rendered by the model's chat template (with its extra variables), ending with the
    assistant prompt."""
    # Render to text, then tokenize without specials: the template already writes BOS and turn markers, and
    # this avoids apply_chat_template(tokenize=True), whose return type differs across transformers versions.
    text = render_chat(tokenizer, messages, template_kwargs=template_kwargs)
    return list(tokenizer.encode(text, add_special_tokens=False))


def eos_token_ids(tokenizer: PreTrainedTokenizerBase, config: ModelConfig) -> set[int]:
    """Every id that ends a generation: the config's EOS ids, the tokenizer's eos, and end-of-turn markers."""
    ids = set(config.eos_token_ids)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    special = set(tokenizer.all_special_tokens) | {
        t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if t.special
    }
    for token in END_OF_TURN_TOKENS:
        # Only special tokens: an ordinary vocabulary entry spelled "<|end|>" is text, not a stop signal.
        if token in special and token in vocab:
            ids.add(int(vocab[token]))
    return ids
