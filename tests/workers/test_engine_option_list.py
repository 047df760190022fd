"""One declaration of the engine options: every command's engine flags and the EngineConfig builder come
from it, with the config's own defaults, so a command cannot lack a flag or disagree on a default."""

from __future__ import annotations

import inspect

import pytest
import typer
from specdec_eval.cli import options as o
from specdec_eval.cli.main import app
from specdec_eval.workers.config import EngineConfig, KVCacheConfig, SpecConfig
from specdec_eval.workers.engine_options import ENGINE_OPTIONS, OPTIONS, field_default, from_options

# Commands that take every engine option, less the ones they declare themselves with a meaning of their own.
FULL = {"run": {"tp"}, "serve": {"tp"}, "generate": set()}
# Commands that take a few; a default of their own is listed here with the reason.
PARTIAL = {
    "bench": {},
    "engine info": {"draft_len": "0: a capacity without spec-dec"},
    "draft train": {},
    "selftest": {  # None: the canary's and the bug-class matrix's own defaults differ
        "model": "None: tiny (canary) or smollm2 (--mutants)",
        "kv_cache": "None: v2 (canary) or the run's default (--mutants)",
        "max_num_tokens": "None: 256 (canary) or the engine's default (--mutants)",
    },
}


def _params(name: str) -> dict:
    command = typer.main.get_command(app)
    for word in name.split():  # "engine info": a command of a group
        command = command.commands[word]
    return {p.name: p for p in command.params}


def _flags(param) -> tuple[str, ...]:
    if param.secondary_opts:  # an on/off pair
        return tuple(f"{a}/{b}" for a, b in zip(param.opts, param.secondary_opts, strict=True))
    return tuple(param.opts)


def test_defaults_are_the_config_dataclasses_own():
    assert from_options() == EngineConfig()  # nothing given: the config's defaults, not a second copy
    spec = from_options(spec="eagle3").spec
    assert spec == SpecConfig()  # spec-dec options unset: SpecConfig's defaults
    assert from_options().kv_cache == KVCacheConfig()
    # every option given its own default: the config's defaults again (a default written twice could drift)
    assert from_options(**{option.name: option.default for option in ENGINE_OPTIONS}) == EngineConfig()
    assert field_default("spec.guard") == SpecConfig().guard


def test_from_options_signature_is_the_list():
    params = inspect.signature(from_options).parameters
    assert list(params) == [option.name for option in ENGINE_OPTIONS]
    assert all(params[o.name].default == o.default for o in ENGINE_OPTIONS)
    with pytest.raises(TypeError, match="block_sise"):
        from_options(block_sise=32)


@pytest.mark.parametrize("command", sorted(FULL))
def test_every_command_exposes_every_engine_option(command):
    params = _params(command)
    for option in ENGINE_OPTIONS:
        if option.name in FULL[command]:
            continue
        assert option.name in params, f"{command} lacks {option.flags[0]}"
        assert set(_flags(params[option.name])) == set(option.flags), (command, option.name)
        assert params[option.name].default == option.default, (command, option.name)


@pytest.mark.parametrize("command", sorted(PARTIAL))
def test_commands_with_a_few_engine_options_take_them_from_the_list(command):
    params = _params(command)
    taken = [name for name in params if name in OPTIONS]
    assert taken, f"{command} takes no engine option"
    for name in taken:
        assert set(_flags(params[name])) == set(OPTIONS[name].flags), (command, name)
        if name not in PARTIAL[command]:
            assert params[name].default == OPTIONS[name].default, (command, name)


def test_a_command_cannot_declare_an_engine_option_a_second_time():
    def command(model: o.Model = "smollm2", engine_flags: o.EngineFlags | None = None) -> None: ...

    with pytest.raises(ValueError, match="declares engine options itself: model"):
        o.engine_options()(command)


def test_run_builds_its_config_from_the_new_flags(capsys, monkeypatch, tmp_path):
    """`run` takes --block-size, --decode-copy, --capture-layers and --events, which it lacked; they reach its
    config."""
    from specdec_eval.evals.pipeline import run as pipeline_run

    from ..cli_helpers import run_cli

    seen = {}

    def fake_run(plan, backend, progress_for=None):
        seen["config"] = backend.target.engine
        from specdec_eval.results.run_summary import RunSummary

        return RunSummary.from_json(
            {
                "verdict": "PASS",
                "tasks": {},
                "events": {},
                "failing_events": 0,
                "elapsed_s": 0.0,
                "model": "tiny",
                "kv_cache": "v1",
                "spec": None,
                "world_size": 1,
            }
        )

    monkeypatch.setattr(pipeline_run, "run", fake_run)
    events = tmp_path / "ev.jsonl"
    code, out, err = run_cli(
        capsys,
        "run",
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--no-reference",
        "--json",
        "--out",
        str(tmp_path / "runs"),
        "--block-size",
        "32",
        "--no-decode-copy",
        "--spec",
        "eagle3",
        "--capture-layers",
        "1,2,3",
        "--events",
        str(events),
    )
    assert code == 0, err
    config = seen["config"]
    assert (config.kv_cache.block_size, config.kv_cache.decode_copy) == (32, False)
    assert config.spec.capture_layers == (1, 2, 3) and config.events_path == str(events)
