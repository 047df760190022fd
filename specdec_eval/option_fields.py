"""Options declared once, on the dataclass that holds their values: a field's default is the option's default, and
its metadata the flag (flags, help, group, bounds, choices, a check of a value with a syntax of its own). The command
line's options and the value back from them both come from that one declaration, as lm-eval's `EvaluatorConfig`
keeps flag and help in field metadata; every command declares its options this way, the engine's included.

    @dataclass(frozen=True)
    class JobOptions:
        gpus: int = field(default=1, metadata=flag("--gpus", help="Ranks per node.", min=1))

Adding an option is one field. A leaf: imports nothing from the project."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass
from typing import Any

FLAG = "specdec_eval.flag"  # the metadata key of a field's flag


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # a flag's default when the field's own is the one


@dataclass(frozen=True)
class Flag:
    flags: tuple[str, ...]  # "--resume/--fresh" for an on/off pair
    help: str | None
    group: str | None = None  # the `--help` panel
    type: Any = None  # the value as given on the command line, where it is not the field's type (text for a list)
    min: float | None = None
    max: float | None = None
    choices: Callable[[], tuple[str, ...]] | None = None  # late: registries may import what imports this
    parse: Callable[[Any], Any] | None = None  # raises the project's UserError on a bad value; the flag keeps it
    convert: Callable[[Any], Any] | None = None  # the command line's value -> the field's value (default: as is)
    default: Any = UNSET  # the command line's default, only for a field that has none (a required value)
    param: str | None = None  # the command's parameter name, where the field's name would clash with another list's
    hidden: bool = False
    envvar: str | None = None  # the environment variable read when the flag is not given (shown in --help)


def flag(*flags: str, help: str | None, **settings: Any) -> dict[str, Flag]:
    """A field's metadata: `field(default=..., metadata=flag("--name", help="..."))`."""
    return {FLAG: Flag(tuple(flags), help, **settings)}


def option(default: Any, *flags: str, help: str | None, **settings: Any) -> Any:
    """A field that is an option: `limit: int = option(10, "--limit", help="...")`, short for
    `field(default=10, metadata=flag("--limit", help="..."))`."""
    return dataclasses.field(default=default, metadata=flag(*flags, help=help, **settings))


def flag_of(cls: type, name: str, **changes: Any) -> Any:
    """A field that takes another dataclass's option as it is declared there, `changes` (default, help, group, ...)
    applied: a command whose option means what `run`'s does declares it by reference, not a second time (say why
    where a change narrows its meaning)."""
    source = next(f for f in dataclasses.fields(cls) if f.name == name)
    spec = dataclasses.replace(source.metadata[FLAG], **{k: v for k, v in changes.items() if k != "default"})
    default = changes.get("default", field_default(source))
    if default is MISSING:
        default = spec.default
    return dataclasses.field(default=default, metadata={FLAG: spec})


@dataclass(frozen=True)
class ListedOption:
    """One option of a dataclass, as a command declares it: what the command line builder reads."""

    name: str  # the command's parameter
    field: str  # the dataclass field it fills
    flags: tuple[str, ...]
    type: Any
    default: Any
    help: str
    group: str | None
    min: float | None
    max: float | None
    choices: Callable[[], tuple[str, ...]] | None
    parse: Callable[[Any], Any] | None
    convert: Callable[[Any], Any] | None
    hidden: bool
    envvar: str | None


def listed_options(cls: type) -> tuple[ListedOption, ...]:
    """The options a dataclass declares (its fields with a flag), in field order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(FLAG)
        if spec is None:
            continue
        default = field_default(f)
        if default is MISSING and spec.default is not UNSET:
            default = spec.default
        if default is MISSING:
            raise TypeError(f"{cls.__name__}.{f.name} has neither a default nor a command-line default")
        out.append(
            ListedOption(
                spec.param or f.name,
                f.name,
                spec.flags,
                spec.type or hints[f.name],
                default,
                spec.help,
                spec.group,
                spec.min,
                spec.max,
                spec.choices,
                spec.parse,
                spec.convert,
                spec.hidden,
                spec.envvar,
            )
        )
    return tuple(out)


def field_default(f: dataclasses.Field) -> Any:
    """A field's default (its factory's value), MISSING when it has none."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def from_values(cls: type, values: Mapping[str, Any], **fixed: Any) -> Any:
    """The dataclass from its options' values by parameter name (converted where a flag says how); fields without a
    flag take `fixed` or their defaults."""
    kwargs = dict(fixed)
    for option in listed_options(cls):
        if option.name in values:
            value = values[option.name]
            kwargs[option.field] = option.convert(value) if option.convert is not None and value is not None else value
    return cls(**kwargs)
