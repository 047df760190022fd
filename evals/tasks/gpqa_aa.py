"""TensorRT-LLM's GPQA-Diamond prompt: `gpqa_diamond_cot_zeroshot_aa`, the task its accuracy tests (`GPQADiamond`,
TestGPTOSS among them) evaluate, on our GPQA data.

Reproduced from TensorRT-LLM `tensorrt_llm/evaluate/lm_eval_tasks/gpqa/cot_zeroshot_aa/` (the YAML
`_gpqa_cot_zeroshot_aa_yaml` and its `utils.py`), version 1.0: zero-shot; the prompt asks for a last line
`Answer: $LETTER`; one filter, `strict-match`, the first match of `(?i)Answer[ \\t]*:[ \\t]*([A-D])` (case-insensitive:
`answer: b` counts); target the bare letter; metric exact_match ignoring case and punctuation; generation until
`</s>`, greedy. The answers are stripped of surrounding spaces and nothing else; the question is used as the file has
it (lm-eval's GPQA tasks also rewrite ` [title]` and double spaces).

One difference, on purpose: TensorRT-LLM's `process_docs` shuffles the four choices with Python's global `random`
(seeded once per evaluation, so the order depends on every draw before it, and on how often `datasets` re-runs the
map); ours is the per-question order of `gpqa_diamond` (a hash of the evaluation seed and the Record ID: `gpqa`
`choice_order`), the same on every rank, run and call. The letters of a question therefore differ from TensorRT-LLM's
run of it; the task, and its expected score, do not.

Sealed as `gpqa_diamond` is: records keep ids, hashes, the extracted letter and correctness, never text. Its
references share `gpqa_diamond.yaml` (one benchmark), each entry naming the prompt variant it was measured on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .data import DataSource
from .family import TaskSpec
from .gpqa import GpqaDiamond, in_memory_docs_yaml

PROMPT = (
    "Answer the following multiple choice question. The last line of your response should be of the following "
    "format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before answering.\n"
    "{{Question}}\nA) {{choice1}}\nB) {{choice2}}\nC) {{choice3}}\nD) {{choice4}}"
)
ANSWER_REGEX = r"(?i)Answer[ \t]*:[ \t]*([A-D])"
_ANSWER = re.compile(ANSWER_REGEX)
INVALID = "[invalid]"
GENERATION_KWARGS = {"until": ["</s>"], "do_sample": False, "temperature": 0.0}


def extract(output: str) -> str:
    """The strict-match filter: the letter of the first `Answer: X` (lm-eval's regex filter, group_select 0)."""
    found = _ANSWER.findall(output)
    return found[0].strip() if found else INVALID


def is_correct(extracted: str, target: str) -> bool:
    """exact_match with ignore_case and ignore_punctuation, on a letter."""
    return extracted != INVALID and extracted.strip().upper() == target.strip().strip("()").upper()


class GpqaDiamondAA(GpqaDiamond):
    name = "gpqa_diamond_aa"
    variant = "gpqa_diamond_cot_zeroshot_aa"
    reference_name = "gpqa_diamond"  # one benchmark: its entries name the variant they were measured on
    filters = ("strict-match",)

    def task_yaml(self, spec: TaskSpec, source: DataSource, stock: Path, seed: int) -> str:
        config = {
            "task": spec.lm_eval_name,
            "tag": [],
            "output_type": "generate_until",
            "training_split": "train",
            "validation_split": "train",
            "test_split": None,
            "doc_to_text": PROMPT,
            "doc_to_target": "{{answer[1]}}",  # our docs say "(B)"; the variant's target is the bare letter
            "filter_list": [
                {
                    "name": "strict-match",
                    "filter": [
                        {"function": "regex", "regex_pattern": ANSWER_REGEX, "group_select": 0},
                        {"function": "take_first"},
                    ],
                },
            ],
            "num_fewshot": 0,
            "metric_list": [
                {
                    "metric": "exact_match",
                    "aggregation": "mean",
                    "higher_is_better": True,
                    "ignore_case": True,
                    "ignore_punctuation": True,
                }
            ],
            "metadata": {"version": 1.0},
        }
        return in_memory_docs_yaml(config, source, seed, "aa")

    def generation_kwargs(self, stock: Path) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, list) else v for k, v in GENERATION_KWARGS.items()}

    def extracted(self, filtered: str) -> str:
        letter = filtered.strip().upper()
        return letter if letter in ("A", "B", "C", "D") else INVALID if filtered == INVALID else "[other]"

    def live_correct(self, output: str, doc: Any) -> bool | None:
        answer = doc.get("answer") if isinstance(doc, dict) else None
        if not isinstance(answer, str) or not re.fullmatch(r"\([A-D]\)", answer):
            return None
        return is_correct(extract(output), answer)


FAMILY = GpqaDiamondAA()
TASKS = (
    TaskSpec("gpqa_diamond_aa", FAMILY),
    TaskSpec("gpqa_diamond_aa_smoke", FAMILY, smoke=True),  # self-written GPQA-format questions (offline demos only)
)
