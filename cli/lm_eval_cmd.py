"""`specdec-eval lm-eval ...`: lm-eval's own command line, with our engine registered as model `specdec`.

lm-eval has no plugin discovery: its `lm_eval` executable only knows models it imports itself. This command
imports our adapter (which registers `specdec`) and then hands every argument to lm-eval unchanged."""

from __future__ import annotations

import sys

import typer


def lm_eval_cmd(ctx: typer.Context) -> None:
    """lm-eval's CLI with `--model specdec` available; every argument goes to lm-eval.

    Examples:
      specdec-eval lm-eval run --model specdec --model_args model=smollm2,spec=eagle3,kv_cache=v2 \\
          --tasks gsm8k --limit 20
      specdec-eval lm-eval ls tasks
    """
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    from ..evals.pipeline import lm_adapter  # noqa: F401  (registers the `specdec` model)

    setup_logging()
    parser = HarnessCLI()
    saved = sys.argv
    sys.argv = ["lm-eval", *ctx.args]
    try:
        parser.execute(parser.parse_args())
    finally:
        sys.argv = saved
