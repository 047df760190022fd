"""The generation-condition options, declared once: `conditions` takes them now; `run`, `ab` (after `--`) and
`selftest` take the same declarations when they are wired (evals/conditions/). Each value is checked where it is
declared, so a bad one is a usage error naming the option: one line, exit status 2."""

from __future__ import annotations

from typing import Annotated

import typer

from ..evals.conditions.gen_kwargs import GenKwargs
from ..evals.conditions.reference import ACCEPT_FLAG
from ..evals.conditions.repeats import MAX_REPEATS
from ..workers.loading.chat_template import ChatTemplateKwargs
from .options import checked

CONDITIONS = "Generation conditions"

GenKwargsOption = Annotated[
    str | None,
    typer.Option(
        "--gen-kwargs",
        help="lm-eval's generation kwargs on each task's own, e.g. temperature=1.0,top_p=1.0 (also top_k, seed, "
        "do_sample, max_gen_toks). A temperature > 0 samples (lm-eval would keep the task's do_sample: false and "
        "decode greedily); seed is the base of each sample's seed. Applies to both sides and the baseline.",
        callback=checked(GenKwargs.parse),
        rich_help_panel=CONDITIONS,
    ),
]
ChatTemplateKwargsOption = Annotated[
    str | None,
    typer.Option(
        "--chat-template-kwargs",
        help='A JSON object of chat-template variables, e.g. \'{"reasoning_effort": "medium"}\': rendered into our '
        "chat template (with --apply-chat-template), sent as chat_template_kwargs to an endpoint's chat requests.",
        callback=checked(ChatTemplateKwargs.parse),
        rich_help_panel=CONDITIONS,
    ),
]
RepeatsOption = Annotated[
    int,
    typer.Option(
        "--repeats",
        min=1,
        max=MAX_REPEATS,
        help="Samples per document at temperature > 0, each with its own seed; scored as the mean over documents "
        "of each document's mean, its error clustered by document. Greedy runs take 1.",
        rich_help_panel=CONDITIONS,
    ),
]
AcceptMismatchOption = Annotated[
    bool,
    typer.Option(
        ACCEPT_FLAG,
        help="Judge the accuracy gate against the matched reference although its stated conditions differ from "
        "this run's (otherwise NO-GATE, the differences named); the run and its report say so.",
        rich_help_panel=CONDITIONS,
    ),
]
