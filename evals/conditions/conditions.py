"""The conditions one task of a run is evaluated under: how its prompts are built and how its answers are decoded.

A score means something only under the conditions it was measured in: a reference sampled at T = 1.0 with the chat
template and `reasoning_effort: medium` is not the same experiment as a greedy run of another prompt. One frozen value
carries them: the run records it in its manifest, folds it into its run key (so a sampled run never resumes from,
nor pairs with, a greedy one) and compares it with the matched reference entry's.

Built by `conditions_for` from the task, the run's options and its generation kwargs layered on the task's YAML. It
imports nothing from the pipeline, so the pipeline, the gates and the run identity can all use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ...errors import UserError
from ...workers.loading.chat_template import ChatTemplateKwargs
from .gen_kwargs import GenKwargs
from .repeats import check_repeats


@dataclass(frozen=True)
class GenerationConditions:
    """task_variant: the prompt and scoring the samples answer (the lm-eval task a family reproduces, e.g.
    `gsm8k`, `gpqa_diamond_cot_zeroshot`, `gpqa_diamond_cot_zeroshot_aa`). temperature 0 is greedy; top_p and
    top_k then play no part. max_output_len: generated tokens per sample at most. repeats: samples per document.
    seed: the base of the per-sample seeds when the generation kwargs name one (None: the run's evaluation seed).
    generation_kwargs: what the task's lm-eval YAML states after the kwargs were applied (for the record)."""

    task_variant: str
    num_fewshot: int
    apply_chat_template: bool
    chat_template_kwargs: ChatTemplateKwargs = field(default_factory=ChatTemplateKwargs)
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_output_len: int = 256
    repeats: int = 1
    seed: int | None = None
    generation_kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        check_repeats(self.repeats, self.temperature)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def decoding(self) -> str:
        """e.g. "greedy", "sampled at T=1.0, top_p 0.95"."""
        if self.greedy:
            return "greedy"
        extra = [f"top_p {self.top_p:g}"] if self.top_p < 1.0 else []
        extra += [f"top_k {self.top_k}"] if self.top_k else []
        return ", ".join([f"sampled at T={self.temperature:g}", *extra])

    def describe(self) -> str:
        """One line for the run's output and report."""
        template = "no chat template"
        if self.apply_chat_template:
            template = "chat template" + (f" with {self.chat_template_kwargs}" if self.chat_template_kwargs else "")
        parts = [
            self.decoding(),
            template,
            f"{self.num_fewshot}-shot",
            self.task_variant,
            f"up to {self.max_output_len} tokens",
        ]
        if self.repeats > 1:
            parts.append(f"{self.repeats} samples per question")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the manifest's record of the task's conditions."""
        d = asdict(self)
        d["chat_template_kwargs"] = self.chat_template_kwargs.as_dict()
        d["generation_kwargs"] = dict(self.generation_kwargs)
        return d

    def identity(self) -> dict[str, Any]:
        """What the run key folds in: everything that shapes the samples. A run of the task's defaults (greedy,
        one sample, no kwargs) adds nothing, so runs recorded before conditions existed keep their keys; the few-shot
        count, output length and chat template are in the run key already."""
        out: dict[str, Any] = {}
        if not self.greedy:
            out.update(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        if self.seed is not None:
            out["seed"] = self.seed
        if self.repeats > 1:
            out["repeats"] = self.repeats
        if self.chat_template_kwargs:
            out["chat_template_kwargs"] = self.chat_template_kwargs.as_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GenerationConditions:
        d = dict(d)
        d["chat_template_kwargs"] = ChatTemplateKwargs.of(d.get("chat_template_kwargs"))
        d["generation_kwargs"] = tuple((d.get("generation_kwargs") or {}).items())
        return cls(**d)


def conditions_for(
    task_variant: str,
    task_kwargs: Mapping[str, Any],
    *,
    gen_kwargs: GenKwargs = GenKwargs(),
    num_fewshot: int,
    default_max_output_len: int,
    apply_chat_template: bool = False,
    chat_template_kwargs: ChatTemplateKwargs = ChatTemplateKwargs(),
    repeats: int = 1,
) -> GenerationConditions:
    """The conditions of one task: `task_kwargs` are its YAML's generation_kwargs (the task spec's own kwargs already
    applied), `gen_kwargs` the run's (--gen-kwargs), `default_max_output_len` the output length the run gives when the
    kwargs name none (--max-output-len, else the task's). Chat-template kwargs without the chat template are refused:
    they would change nothing."""
    if chat_template_kwargs and not apply_chat_template:
        raise UserError("--chat-template-kwargs needs --apply-chat-template (without the template they change nothing)")
    kwargs = gen_kwargs.apply(task_kwargs)
    do_sample = kwargs.get("do_sample")
    temperature = float(kwargs.get("temperature") or 0.0)
    if do_sample is False or (do_sample is None and temperature <= 0):  # lm-eval's normalize_gen_kwargs
        temperature = 0.0
    max_output_len = int(kwargs.get("max_gen_toks") or default_max_output_len)
    return GenerationConditions(
        task_variant=task_variant,
        num_fewshot=num_fewshot,
        apply_chat_template=apply_chat_template,
        chat_template_kwargs=chat_template_kwargs,
        temperature=temperature,
        top_p=float(kwargs.get("top_p", 1.0)) if temperature else 1.0,
        top_k=int(kwargs.get("top_k", 0)) if temperature else 0,
        max_output_len=max_output_len,
        repeats=repeats,
        seed=gen_kwargs.get("seed"),
        generation_kwargs=tuple(kwargs.items()),
    )
