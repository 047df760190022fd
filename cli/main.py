"""`specdec-eval`: the composed Typer app. Each command lives in its own module."""

from __future__ import annotations

import sys

import typer

from ..workers.errors import UserError
from . import ab, bench, draft, engine_info, generate, lm_eval_cmd, report, results_cmds, run, selftest, serve, waives

app = typer.Typer(
    name="specdec-eval",
    help="Accuracy regression tool for one-model Eagle3 speculative decoding.\n\n"
    "Example: specdec-eval generate --model smollm2 prompts.txt",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("generate")(generate.generate)
app.command("run")(run.run)
app.command("ab", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(ab.ab)
app.command("runs")(results_cmds.runs)
app.command("compare")(results_cmds.compare)
app.command("decide")(results_cmds.decide)
app.command("report")(report.report)
app.command("lm-eval", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False)(lm_eval_cmd.lm_eval_cmd)  # fmt: skip
app.command("bench")(bench.bench)
app.command("serve")(serve.serve)
app.command("selftest")(selftest.selftest)
app.command("waive")(waives.waive)
app.command("unwaive")(waives.unwaive)
app.command("waives")(waives.waives_check)
app.add_typer(engine_info.app, name="engine")
app.add_typer(draft.app, name="draft")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: a user error ends in one line on stderr and exit status 2."""
    try:
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)  # typer.Exit(n) comes back as a return value when standalone_mode is off
    except UserError as e:
        print(f"specdec-eval: error: {e}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        print("specdec-eval: aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # click's usage errors
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        raise


if __name__ == "__main__":
    main()
