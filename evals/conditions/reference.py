"""The conditions a reference entry states, their differences from a run's in words, and the gate's rule about them.

**Keys an entry may state** (evals/references/*.yaml, beside TensorRT-LLM's own keys, which stay readable):
`task_variant` (the lm-eval task whose prompt and scoring the reference used), `num_fewshot`, `apply_chat_template`,
`chat_template_kwargs` (a mapping), `temperature` (0: greedy), `top_p`, `top_k`, `max_output_len`. The value
`unknown` says the source was read and does not state it; a key left out is not stated either. TensorRT-LLM's free
`extra_acc_spec` string is read as generation kwargs where it is one (`temperature=0.8,top_p=0.95`).

**The rule.** A run whose conditions differ from the matched entry's in any stated condition is not judged against
it: the accuracy gate reads NO-GATE, with every difference named ("reference sampled at T=1.0, this run greedy"),
unless the user accepts the mismatch (`--accept-condition-mismatch`); then the gate judges and the run and its
report say what was accepted. Conditions the entry does not state are listed, never counted as differences.
Repeats and seeds are not conditions: they change the variance of the score, not what it estimates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from ...results.run_summary import FAIL, NO_GATE, PASS
from ...workers.loading.chat_template import ChatTemplateKwargs
from .conditions import GenerationConditions
from .gen_kwargs import GenKwargs

UNKNOWN = "unknown"
CONDITION_KEYS = (
    "task_variant",
    "num_fewshot",
    "apply_chat_template",
    "chat_template_kwargs",
    "temperature",
    "top_p",
    "top_k",
    "max_output_len",
)
ACCEPT_FLAG = "--accept-condition-mismatch"


@dataclass(frozen=True)
class ReferenceConditions:
    """What an entry states; None: not stated (left out, or `unknown`)."""

    task_variant: str | None = None
    num_fewshot: int | None = None
    apply_chat_template: bool | None = None
    chat_template_kwargs: ChatTemplateKwargs | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_output_len: int | None = None

    @classmethod
    def of(cls, entry: Mapping[str, Any], where: str = "reference entry") -> ReferenceConditions:
        """Read and check an entry's condition keys; UserError naming `where` and the key."""
        values: dict[str, Any] = {}
        spec = entry.get("extra_acc_spec")
        if isinstance(spec, str) and "=" in spec:  # TensorRT-LLM's free string, when it holds generation kwargs
            try:
                kwargs = GenKwargs.parse(spec, f"{where}: extra_acc_spec")
            except UserError:
                kwargs = GenKwargs()  # another use of the free string (e.g. use_sa_spec): not conditions
            values.update((k, kwargs.get(k)) for k in ("temperature", "top_p", "top_k") if kwargs.get(k) is not None)
        for key in CONDITION_KEYS:
            if key in entry:
                values[key] = None if entry[key] == UNKNOWN else _checked(key, entry[key], f"{where}: {key}")
        return cls(**values)

    def unstated(self) -> tuple[str, ...]:
        return tuple(k for k in CONDITION_KEYS if getattr(self, k) is None)


def _checked(key: str, value: Any, where: str) -> Any:
    if key == "task_variant":
        if not isinstance(value, str) or not value:
            raise UserError(f"{where}: expected a task name or '{UNKNOWN}', got {value!r}")
        return value
    if key == "apply_chat_template":
        if not isinstance(value, bool):
            raise UserError(f"{where}: expected true, false or '{UNKNOWN}', got {value!r}")
        return value
    if key == "chat_template_kwargs":
        return ChatTemplateKwargs.of(value, where)
    if key in ("num_fewshot", "max_output_len"):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "num_fewshot" else 1):
            raise UserError(f"{where}: expected a whole number or '{UNKNOWN}', got {value!r}")
        return value
    return GenKwargs.of({key: value}, where).get(key)  # temperature, top_p, top_k: the generation kwargs' checks


def differences(run: GenerationConditions, ref: ReferenceConditions) -> list[str]:
    """Every stated condition of the reference that the run does not share, in words; [] when none."""
    out: list[str] = []
    if ref.task_variant is not None and ref.task_variant != run.task_variant:
        out.append(f"reference measured on the {ref.task_variant} prompt, this run on {run.task_variant}")
    out += _decoding_differences(run, ref)
    if ref.apply_chat_template is not None and ref.apply_chat_template != run.apply_chat_template:
        out.append(
            "reference rendered through the chat template, this run without it"
            if ref.apply_chat_template
            else "reference without the chat template, this run through it"
        )
    both_templated = run.apply_chat_template and ref.apply_chat_template is not False
    if both_templated and ref.chat_template_kwargs is not None and ref.chat_template_kwargs != run.chat_template_kwargs:
        out.append(
            f"reference chat-template kwargs {ref.chat_template_kwargs or 'none'}, "
            f"this run {run.chat_template_kwargs or 'none'}"
        )
    if ref.num_fewshot is not None and ref.num_fewshot != run.num_fewshot:
        out.append(f"reference {ref.num_fewshot}-shot, this run {run.num_fewshot}-shot")
    if ref.max_output_len is not None and ref.max_output_len != run.max_output_len:
        out.append(f"reference up to {ref.max_output_len} output tokens, this run {run.max_output_len}")
    return out


def _decoding_differences(run: GenerationConditions, ref: ReferenceConditions) -> list[str]:
    out = []
    if ref.temperature is not None:
        ref_greedy = ref.temperature == 0
        if ref_greedy and not run.greedy:
            return [f"reference greedy, this run {run.decoding()}"]
        if not ref_greedy and run.greedy:
            return [f"reference sampled at T={ref.temperature:g}, this run greedy"]
        if ref_greedy:
            return []
        if ref.temperature != run.temperature:
            out.append(f"reference sampled at T={ref.temperature:g}, this run at T={run.temperature:g}")
    if run.greedy:
        return []  # top_p and top_k play no part in a greedy run
    if ref.top_p is not None and ref.top_p != run.top_p:
        out.append(f"reference top_p {ref.top_p:g}, this run {run.top_p:g}")
    if ref.top_k is not None and ref.top_k != run.top_k:
        out.append(f"reference top_k {ref.top_k or 'off'}, this run {run.top_k or 'off'}")
    return out


@dataclass(frozen=True)
class ConditionCheck:
    """A run's conditions against its matched reference entry's, and what the accuracy gate may then say."""

    differences: tuple[str, ...]
    unstated: tuple[str, ...]
    accepted: bool = False  # the user accepted the mismatch (ACCEPT_FLAG)

    @property
    def blocks(self) -> bool:
        """The gate may not judge: the conditions differ and nobody accepted it."""
        return bool(self.differences) and not self.accepted

    def verdict(self, gate_verdict: str) -> str:
        """The accuracy gate's verdict under the rule: its PASS or FAIL becomes NO-GATE while the conditions differ
        unaccepted (a FAIL against another experiment's number is no more evidence than a PASS)."""
        return NO_GATE if self.blocks and gate_verdict in (PASS, FAIL) else gate_verdict

    def lines(self) -> list[str]:
        """What the run prints under its accuracy gate, and the report repeats."""
        if self.differences and not self.accepted:
            head = [
                "NO-GATE: this run's conditions differ from the reference's: "
                + "; ".join(self.differences)
                + f" (pass {ACCEPT_FLAG} to judge it anyway)"
            ]
        elif self.differences:
            head = [f"judged although the conditions differ ({ACCEPT_FLAG}): " + "; ".join(self.differences)]
        else:
            head = ["conditions match the reference's"]
        if self.unstated:
            head.append("the reference does not state: " + ", ".join(self.unstated))
        return head

    def to_dict(self) -> dict[str, Any]:
        return {
            "differences": list(self.differences),
            "unstated": list(self.unstated),
            "accepted": self.accepted,
            "blocks": self.blocks,
        }


def check_conditions(run: GenerationConditions, entry: Mapping[str, Any], accepted: bool = False) -> ConditionCheck:
    """The run against a reference entry (a references file's mapping)."""
    ref = ReferenceConditions.of(entry)
    relevant = [k for k in ref.unstated() if run.temperature or k not in ("top_p", "top_k")]
    if not run.apply_chat_template:
        relevant = [k for k in relevant if k != "chat_template_kwargs"]
    return ConditionCheck(tuple(differences(run, ref)), tuple(relevant), accepted)
