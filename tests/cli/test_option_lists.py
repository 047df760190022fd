"""Every option of `run` is declared once, on the value it fills (EvalOptions, RunPlan, JobOptions, EndpointOptions,
and the engine's list), with that value's own default; `ab`, `selftest --mutants` and `bench --verdict` take the
same declarations, so a default cannot differ between commands (ab looked after 32 documents where run looks after
64)."""

from __future__ import annotations

import dataclasses

import pytest
import typer
from specdec_eval.cli import options as o
from specdec_eval.cli.main import app
from specdec_eval.evals.run_types import EvalOptions, RunPlan
from specdec_eval.launch.job_options import JobOptions
from specdec_eval.peers.client.options import EndpointOptions
from specdec_eval.workers.engine_options import ENGINE_OPTIONS

from specdec_eval.option_fields import flag, flag_of, from_values, listed_options

LISTS = (EvalOptions, RunPlan, JobOptions, EndpointOptions)


def _params(name: str) -> dict:
    return {p.name: p for p in typer.main.get_command(app).commands[name].params}


def test_run_takes_every_listed_option_with_its_values_default_and_nothing_else():
    params = _params("run")
    listed = {option.name: option for cls in LISTS for option in listed_options(cls)}
    engine = {option.name for option in ENGINE_OPTIONS if option.name != "tp"}  # --tp is the job's (JobOptions)
    assert set(params) == set(listed) | engine | {"json_out"}
    for name, option in listed.items():
        assert params[name].default == option.default, name
        assert option.flags[0].split("/")[0] in params[name].opts, name


@dataclasses.dataclass(frozen=True)
class Extra:
    width: int = dataclasses.field(default=3, metadata=flag("--width", min=1, help="How wide."))
    names: tuple[str, ...] = dataclasses.field(
        default=(),
        metadata=flag("--names", type=str, convert=lambda text: tuple(text.split(",")), help="Comma-separated."),
    )
    internal: int = 7  # no flag: not an option


def test_a_new_option_is_one_field():
    """A field with a flag is an option; its default is the field's, and the value comes back converted."""
    (width, names) = listed_options(Extra)
    assert (width.name, width.default, width.min, names.type) == ("width", 3, 1, str)
    assert from_values(Extra, {"width": 5, "names": "a,b"}) == Extra(5, ("a", "b"), 7)

    @o.dataclass_options(extra=Extra)
    def command(extra: Extra) -> Extra:
        return extra

    assert command(width=4, names=None) == Extra(4, None, 7)  # None: the flag not given, nothing to convert


@pytest.mark.parametrize(
    "command, name",
    [
        ("ab", "early_stop_batch"),
        ("ab", "out"),
        ("selftest", "data_dir"),
        ("selftest", "max_output_len"),
        ("bench", "max_output_len"),
        ("bench", "data_dir"),
    ],
)
def test_other_commands_share_runs_defaults(command, name):
    assert _params(command)[name].default == _params("run")[name].default


def test_selftest_mutants_runs_are_small_by_its_own_documented_default():
    assert _params("selftest")["limit"].default == 10 and _params("run")["limit"].default is None


def test_an_option_declared_in_two_lists_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Clash:
        limit: int = dataclasses.field(default=1, metadata=flag("--limit", help="Again."))

    with pytest.raises(ValueError, match="declared twice: limit"):
        o.dataclass_options(options=EvalOptions, clash=Clash)


def test_flag_of_takes_another_dataclass_option_by_reference():
    """A command's own dataclass takes `run`'s option as declared there; only the named settings change."""

    @dataclasses.dataclass(frozen=True)
    class Narrower:
        limit: int | None = flag_of(EvalOptions, "limit", default=10, help="Fewer.")
        data_dir: str | None = flag_of(EvalOptions, "data_dir")

    (limit, data_dir) = listed_options(Narrower)
    (run_limit,) = [o for o in listed_options(EvalOptions) if o.name == "limit"]
    (run_data_dir,) = [o for o in listed_options(EvalOptions) if o.name == "data_dir"]
    assert (limit.default, limit.help, limit.flags, limit.min) == (10, "Fewer.", run_limit.flags, run_limit.min)
    assert (data_dir.default, data_dir.help, data_dir.group) == (
        run_data_dir.default,
        run_data_dir.help,
        run_data_dir.group,
    )


@pytest.mark.parametrize("command", ["serve", "bench", "selftest", "ab"])
def test_every_command_declares_its_options_on_a_dataclass(command):
    """No option declared inline: each parameter of these commands is an option of a dataclass (or an argument)."""
    from specdec_eval.cli.ab import ABOptions
    from specdec_eval.cli.bench import BenchOptions
    from specdec_eval.cli.selftest import SelftestOptions
    from specdec_eval.cli.serve import ServeOptions

    own = {"serve": ServeOptions, "bench": BenchOptions, "selftest": SelftestOptions, "ab": ABOptions}[command]
    declared = {option.name for option in listed_options(own)} | {option.name for option in ENGINE_OPTIONS}
    options = {name for name, p in _params(command).items() if isinstance(p, typer.core.TyperOption)}
    assert options <= declared, options - declared


def test_serve_api_key_reads_its_variable():
    param = _params("serve")["api_key"]
    assert param.envvar == "SPECDEC_EVAL_API_KEY" and param.show_envvar
