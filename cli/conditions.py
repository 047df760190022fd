"""`specdec-eval conditions`: the generation conditions a run would evaluate each task under, the reference entry it
would be judged against, that entry's stated conditions, and what the accuracy gate would then do. Nothing runs."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..evals.conditions.gen_kwargs import GenKwargs
from ..evals.conditions.reference import check_conditions
from ..evals.gates.references import lookup, reference_selection
from ..evals.run_types import EvalOptions
from ..evals.tasks.registry import TASKS, parse_tasks, task_conditions
from ..workers.loading.chat_template import ChatTemplateKwargs
from ..workers.registry import spec_method
from . import options as o

DEFAULT_MODEL_KEY = "HuggingFaceTB/SmolLM2-135M-Instruct"
# The condition options as `run` declares them (`EvalOptions`), so both take the same values.
GenKwargsOption, _ = o.option_of(EvalOptions, "gen_kwargs")
ChatTemplateKwargsOption, _ = o.option_of(EvalOptions, "chat_template_kwargs")
RepeatsOption, _ = o.option_of(EvalOptions, "repeats")
AcceptMismatchOption, _ = o.option_of(EvalOptions, "accept_condition_mismatch")


def conditions(
    tasks: Annotated[str, typer.Option("--tasks", "-t", help=f"Comma-separated, from: {', '.join(TASKS)}.")] = "gsm8k",
    model_key: Annotated[
        str, typer.Option("--model-key", help="Reference key of the model, e.g. GPT-OSS/120B-MXFP4.")
    ] = DEFAULT_MODEL_KEY,
    spec: o.Spec = "none",
    kv_cache: Annotated[
        str | None, typer.Option("--kv-cache", help="KV-cache version the run declares (v1, v2; none: any).")
    ] = None,
    dtype: o.DType = "auto",
    num_fewshot: Annotated[int | None, typer.Option("--num-fewshot", min=0, help="Override the task's shots.")] = None,
    max_output_len: Annotated[
        int | None, typer.Option("--max-output-len", min=1, help="Generated tokens per sample.")
    ] = None,
    apply_chat_template: Annotated[
        bool, typer.Option("--apply-chat-template", help="Render prompts with the model's chat template.")
    ] = False,
    gen_kwargs: GenKwargsOption = None,
    chat_template_kwargs: ChatTemplateKwargsOption = None,
    repeats: RepeatsOption = 1,
    accept_condition_mismatch: AcceptMismatchOption = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Each task's generation conditions, its reference entry and what the accuracy gate would say about them.

    Example:  specdec-eval conditions --tasks gpqa_diamond_aa --model-key GPT-OSS/120B-MXFP4 --spec eagle3
    --apply-chat-template --gen-kwargs temperature=1.0,top_p=1.0 --chat-template-kwargs
    '{"reasoning_effort": "medium"}' --repeats 2
    """
    kwargs = GenKwargs.parse(gen_kwargs)
    template_kwargs = ChatTemplateKwargs.parse(chat_template_kwargs) if chat_template_kwargs else ChatTemplateKwargs()
    algo = spec_method(spec).reference_algo if spec and spec != "none" else None
    report = []
    for task in parse_tasks(tasks):
        run = task_conditions(
            task,
            gen_kwargs=kwargs,
            apply_chat_template=apply_chat_template,
            chat_template_kwargs=template_kwargs,
            num_fewshot=num_fewshot,
            max_output_len=max_output_len,
            repeats=repeats,
        )
        selection = reference_selection(
            dtype=dtype,
            spec_dec_algo=algo,
            kv_cache=kv_cache,
            num_fewshot=run.num_fewshot,
            max_output_len=run.max_output_len,
            apply_chat_template=apply_chat_template,
        )
        entry: dict = {"task": task.name, "conditions": run.to_dict(), "describe": run.describe()}
        if task.smoke:
            entry["reference"] = None  # the smoke sets are never scored against a reference
        else:
            family = task.family
            where = {"reference_dir": family.reference_dir} if family.reference_dir is not None else {}
            ref = lookup(family.name, model_key, selection, conditions=run, **where)
            check = check_conditions(run, ref.entry, accept_condition_mismatch)
            entry["reference"] = {
                "model_key": model_key,
                "accuracy": ref.accuracy,
                "source": ref.entry.get("source"),
                "check": check.to_dict(),
                "lines": check.lines(),
            }
        report.append(entry)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    for entry in report:
        print(f"{entry['task']}: {entry['describe']}")
        print("  generation_kwargs: " + json.dumps(entry["conditions"]["generation_kwargs"]))
        ref = entry["reference"]
        if ref is None:
            print("  reference: none (a smoke set)")
            continue
        print(f"  reference: {ref['model_key']} {ref['accuracy']:g} ({ref['source']})")
        for line in ref["lines"]:
            print(f"  {line}")
