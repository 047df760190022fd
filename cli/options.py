"""Options of every command, each declared once on the dataclass that holds its values (field metadata) and built
into typer options here: the engine's (`EngineOptions`, which `from_options` turns into an EngineConfig) and every
command's own (EvalOptions, RunPlan, JobOptions, EndpointOptions, and those of serve, bench, selftest and ab).
`@engine_options()` gives a command every engine option, `@dataclass_options(...)` every option of the dataclasses
it names, each reaching the command as its built value; a dataclass takes another's option by reference with
`flag_of(cls, name)`, and a command that takes a few engine options declares them with `ANN[name]`.

Each option is validated where it is declared: counts and sizes carry their ranges, names are choices taken from
the registries (so `--help` lists them and a bad value is a usage error, exit status 2), and values with a
syntax of their own (memory sizes, fault specs, layer lists) are parsed by a callback."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Literal

import typer

from ..errors import UserError
from ..option_fields import ListedOption, from_values, listed_options
from ..workers.config import (
    DEVICES,
    DTYPES,
    SPEC_GUARDS,
    WARMUP_MODES,
    EngineConfig,
    KVCacheConfig,
    SamplingParams,
    SpecConfig,
)
from ..workers.engine_options import ENGINE as ENGINE
from ..workers.engine_options import ENGINE_OPTIONS, OPTIONS, from_options
from ..workers.engine_options import EngineOptions as EngineOptions
from ..workers.kv_cache import KV_CACHE_MANAGERS
from ..workers.spec import SPEC_ALGORITHMS

# Defaults come from the config dataclasses, never written twice.
E = EngineConfig()
K = KVCacheConfig()
S = SpecConfig()
SP = SamplingParams()

# Choices as Literal types built from the registries: Typer lists them in --help and refuses anything else.
KV_CACHE_CHOICES = Literal[tuple(KV_CACHE_MANAGERS)]  # type: ignore[valid-type]
DTYPE_CHOICES = Literal[DTYPES]  # type: ignore[valid-type]
DEVICE_CHOICES = Literal[DEVICES]  # type: ignore[valid-type]
SPEC_CHOICES = Literal[("none", *SPEC_ALGORITHMS)]  # type: ignore[valid-type]
SPEC_GUARD_CHOICES = Literal[SPEC_GUARDS]  # type: ignore[valid-type]
WARMUP_CHOICES = Literal[WARMUP_MODES]  # type: ignore[valid-type]


def checked(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An option callback that runs `parse` on the given value (None passes through) and turns its UserError into
    click's usage error, which names the option. The value itself is kept as given."""

    def callback(value: Any) -> Any:
        if value is None or value == []:
            return value
        try:
            parse(value)
        except UserError as e:
            raise typer.BadParameter(str(e)) from None
        return value

    return callback


def _annotated(option: ListedOption) -> Any:
    """The typer option of one declared option: its flags, range, help and group; choices as a Literal type (listed in
    --help, anything else refused), a value with a syntax of its own checked by its parse."""
    kind = option.type
    choices = option.choices() if option.choices else None
    if choices is not None:
        kind = Literal[choices]  # type: ignore[valid-type]
        if type(None) in typing.get_args(option.type):
            kind = kind | None
    bounds = {k: v for k, v in (("min", option.min), ("max", option.max)) if v is not None}
    help_text = option.help.replace("{choices}", " | ".join(choices or ())) if option.help is not None else None
    env = {"envvar": option.envvar, "show_envvar": True} if option.envvar else {}
    callback = checked(option.parse) if option.parse else None
    info = typer.Option(
        *option.flags,
        help=help_text,
        callback=callback,
        rich_help_panel=option.group,
        hidden=option.hidden,
        **env,
        **bounds,
    )
    return Annotated[kind, info]


# One Annotated type per engine option, by its name: commands that take a few declare `model: o.ANN["model"] = ...`
ANN: dict[str, Any] = {option.name: _annotated(option) for option in ENGINE_OPTIONS}


def default(name: str) -> Any:
    """An engine option's default (its config field's)."""
    return OPTIONS[name].default


Model = ANN["model"]
KVCache = ANN["kv_cache"]
DType = ANN["dtype"]
Device = ANN["device"]
DeviceMemory = ANN["device_memory"]
BlockSize = ANN["block_size"]
BlockReuse = ANN["block_reuse"]
DecodeCopy = ANN["decode_copy"]
MaxBatch = ANN["max_batch_size"]
MaxNumTokens = ANN["max_num_tokens"]
MaxSeqLen = ANN["max_seq_len"]
TPSize = ANN["tp"]
Seed = ANN["seed"]
Spec = ANN["spec"]
DraftLen = ANN["draft_len"]
DraftModel = ANN["draft_model"]
SpecSampling = ANN["spec_sampling"]
SpecGuard = ANN["spec_guard"]
CaptureLayers = ANN["capture_layers"]
Inject = ANN["inject"]
MaxRetries = ANN["max_retries"]
Warmup = ANN["warmup"]
EventsPath = ANN["events_path"]


@dataclass(frozen=True)
class EngineFlags:
    """The engine options a command was given (every one in ENGINE_OPTIONS it takes, defaults filled in)."""

    values: MappingProxyType

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def config(self, **overrides: Any) -> EngineConfig:
        """The EngineConfig of these options; bad values raise UserError now."""
        return from_options(**{**self.values, **overrides})


def engine_options(*, exclude: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """A command takes every engine option, built from the one list (`engine_options`), after its own
    parameters; they reach it as one EngineFlags in its parameter `engine_flags`. `exclude`: options the command
    declares itself with another meaning (run and serve: --tp, a job's TP size whose default comes from the layout)."""
    unknown = set(exclude) - set(OPTIONS)
    if unknown:
        raise ValueError(f"not engine options: {', '.join(sorted(unknown))}")
    taken = [option for option in ENGINE_OPTIONS if option.name not in exclude]

    def decorate(command: Callable) -> Callable:
        hints = typing.get_type_hints(command, include_extras=True)
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation), kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(command).parameters.values()
            if p.name != "engine_flags"
        ]
        clash = {p.name for p in own} & {option.name for option in taken}
        if clash:
            raise ValueError(f"{command.__name__} declares engine options itself: {', '.join(sorted(clash))}")
        added = [
            inspect.Parameter(
                option.name, inspect.Parameter.KEYWORD_ONLY, default=option.default, annotation=ANN[option.name]
            )
            for option in taken
        ]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            flags = EngineFlags(MappingProxyType({option.name: kwargs.pop(option.name) for option in taken}))
            return command(**kwargs, engine_flags=flags)

        wrapper.__signature__ = inspect.Signature([*own, *added])  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in (*own, *added)}
        del wrapper.__wrapped__  # typer reads the signature above, not the command's own
        return wrapper

    return decorate


# The one config builder (`engine_options`), for commands that declare a few engine options themselves.
engine_config = from_options


def option_of(cls: type, name: str, **changes: Any) -> tuple[Any, Any]:
    """(Annotated type, default) of one option a dataclass declares, for a command that takes only a few:
    `limit: ANN = DEFAULT`. `changes` (default, help) are for a command where the option means something narrower
    (selftest --mutants: the documents of each run of its matrix); say why where they are used."""
    option = next(o for o in listed_options(cls) if o.name == name)
    option = dataclasses.replace(option, **changes)
    return _annotated(option), option.default


def dataclass_options(**classes: type) -> Callable[[Callable], Callable]:
    """A command takes every option the dataclasses declare (`option_fields`), after its own
    parameters, and receives each dataclass, built from them, in the keyword it is listed under:
    `@dataclass_options(options=EvalOptions, plan=RunPlan)`. A field without a flag whose type is a class listed
    before it (RunPlan.options) gets that class's value."""
    listed = {key: listed_options(cls) for key, cls in classes.items()}
    taken = [option for options in listed.values() for option in options]
    twice = {o.name for o in taken if sum(p.name == o.name for p in taken) > 1}
    if twice:
        raise ValueError(f"options declared twice: {', '.join(sorted(twice))}")

    def decorate(command: Callable) -> Callable:
        hints = typing.get_type_hints(command, include_extras=True)
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation), kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(command).parameters.values()
            if p.name not in classes
        ]
        clash = {p.name for p in own} & {o.name for o in taken}
        if clash:
            raise ValueError(f"{command.__name__} declares listed options itself: {', '.join(sorted(clash))}")
        added = [
            inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=_annotated(o))
            for o in taken
        ]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {o.name: kwargs.pop(o.name) for o in taken}
            built: dict[str, Any] = {}
            for key, cls in classes.items():
                types = typing.get_type_hints(cls)
                links = {
                    f.name: built[k] for f in dataclasses.fields(cls) for k in built if types[f.name] is classes[k]
                }
                built[key] = from_values(cls, values, **links)
            return command(**kwargs, **built)

        wrapper.__signature__ = inspect.Signature([*own, *added])  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in (*own, *added)}
        del wrapper.__wrapped__  # typer reads the signature above, not the command's own
        return wrapper

    return decorate


def given(ctx: typer.Context, names: Iterable[str]) -> frozenset[str]:
    """The options among `names` given on the command line (the others took their defaults)."""
    sources = {name: ctx.get_parameter_source(name) for name in names}
    return frozenset(name for name, source in sources.items() if source is not None and source.name == "COMMANDLINE")
