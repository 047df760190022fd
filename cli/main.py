"""`specdec-eval`: the composed Typer app. Each command lives in its own module."""

from __future__ import annotations

import sys

import typer

from ..errors import UserError
from . import (
    ab,
    bench,
    conditions,
    draft,
    engine_info,
    export,
    generate,
    lm_eval_cmd,
    report,
    results_cmds,
    run,
    selftest,
    serve,
    sweep,
    waives,
)

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
app.command("conditions")(conditions.conditions)
app.command("ab", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(ab.ab)
app.command("runs")(results_cmds.runs)
app.command("compare")(results_cmds.compare)
app.command("decide")(results_cmds.decide)
app.command("report")(report.report)
app.command(
    "lm-eval", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False
)(lm_eval_cmd.lm_eval_cmd)
app.command("export")(export.export)
app.command("bench")(bench.bench)
app.command("serve")(serve.serve)
app.command("selftest")(selftest.selftest)
app.command("sweep", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(sweep.sweep)
app.command("drift")(sweep.drift)
app.command("waive")(waives.waive)
app.command("unwaive")(waives.unwaive)
app.command("waives")(waives.waives_check)
app.add_typer(engine_info.app, name="engine")
app.add_typer(draft.app, name="draft")


def _exception_classes(name: str) -> tuple[type[BaseException], ...]:
    """The class `name` from every click this process can raise: the `click` package and the copy Typer vendors
    (typer._click since 0.20, not a subclass of click's), whichever are installed. Found once, at import."""
    import importlib

    found: list[type[BaseException]] = []
    for module in ("click.exceptions", "typer._click.exceptions", "typer.exceptions"):
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    return tuple(found)


CLICK_ERRORS = _exception_classes("ClickException")  # usage errors and bad parameters: our exit status 2
CLICK_EXITS = (typer.Exit, *_exception_classes("Exit"))
CLICK_ABORTS = (typer.Abort, *_exception_classes("Abort"))
PROG = "specdec-eval"


def _usage_error(e: BaseException) -> str:
    """click's message as one line: the reason, then where to get help."""
    message = " ".join(e.format_message().split()).replace(": Value error, ", ": ")  # type: ignore[attr-defined]
    ctx = getattr(e, "ctx", None)
    if ctx is not None and getattr(ctx, "command_path", None):
        message += f" (see '{ctx.command_path} --help')"
    return message


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: a user error (ours or a usage error of click/Typer) ends in one line on stderr,
    `specdec-eval: error: ...`, and exit status 2, never a traceback."""
    try:
        code = app(args=argv, prog_name=PROG, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)  # typer.Exit(n) comes back as a return value when standalone_mode is off
    except UserError as e:
        _error(str(e))
    except CLICK_EXITS as e:
        sys.exit(getattr(e, "exit_code", 0))
    except CLICK_ABORTS:
        print(f"{PROG}: aborted", file=sys.stderr)
        sys.exit(130)
    except CLICK_ERRORS as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `specdec-eval` or `specdec-eval engine` alone: the help
            help_text = e.format_message().strip()  # type: ignore[attr-defined]  (empty: rich printed it already)
            if help_text:
                print(help_text, file=sys.stderr)
            _error("missing command (the commands are listed above)")
        _error(_usage_error(e))


if __name__ == "__main__":
    main()
