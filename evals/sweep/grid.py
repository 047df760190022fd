"""The sweep's grid: axes of values, their product as cells, and what each cell adds to a `run` command.

An axis is named by a `run` flag of our engine (`batch`, `kv-cache`, `block-reuse`, `draft-len`, `tp`) or by a
placeholder of the `--serve-cmd` template (`{max_num_seqs}`), which the cell's value fills. A value is its text,
or `LABEL:TEXT` where the grid shows LABEL and the command gets TEXT (a server flag that is a switch:
`prefix_caching=on:--enable-prefix-caching,off:--no-enable-prefix-caching`). For one of our flags, on / off
stand for the switch's two spellings (`--block-reuse` / `--no-block-reuse`). The base cell is the first value
of every axis. A grid has at most `MAX_CELLS` cells: each is a whole `run`, and a larger product is a typo (an
axis of 1,000 values), refused before anything is written (the product is counted, never built to count it)."""

from __future__ import annotations

import itertools
import math
import re
import string
from dataclasses import dataclass

from ...errors import UserError

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
SWITCH = {"on": "", "off": "no-"}
MAX_CELLS = 1024


@dataclass(frozen=True)
class Value:
    label: str  # what the grid shows
    text: str  # what the command gets


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Value, ...]

    @classmethod
    def parse(cls, spec: str) -> Axis:
        """`NAME=V1,V2,...` (each V: TEXT or LABEL:TEXT)."""
        name, sep, rest = spec.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name) or not rest.strip():
            raise UserError(f"--axis {spec!r}: expected NAME=V1,V2,... (e.g. batch=1,4 or kv-cache=v1,v2)")
        values = []
        for item in rest.split(","):
            label, colon, text = item.partition(":")
            value = Value(label.strip(), text.strip()) if colon else Value(item.strip(), item.strip())
            if not value.label:
                raise UserError(f"--axis {spec!r}: an empty value")
            values.append(value)
        labels = [v.label for v in values]
        if len(set(labels)) != len(labels):
            raise UserError(f"--axis {spec!r}: a value appears twice")
        return cls(name, tuple(values))

    @property
    def key(self) -> str:
        """The placeholder name of a template (`kv-cache` and `kv_cache` are one axis)."""
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class Cell:
    """One configuration: a value of every axis, in axis order."""

    values: tuple[tuple[str, Value], ...]  # (axis name, value)

    @property
    def name(self) -> str:
        return " ".join(f"{axis}={v.label}" for axis, v in self.values)

    @property
    def slug(self) -> str:
        """The cell's name as a file name."""
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(f"{a}={v.label}" for a, v in self.values))

    def labels(self) -> dict[str, str]:
        return {axis: v.label for axis, v in self.values}


@dataclass(frozen=True)
class Grid:
    axes: tuple[Axis, ...]
    serve_cmd: str | None = None  # a template whose {placeholders} the server axes fill

    def __post_init__(self) -> None:
        names = [a.key for a in self.axes]
        if not names:
            raise UserError("give at least one --axis NAME=V1,V2 (e.g. --axis batch=1,4)")
        if len(set(names)) != len(names):
            raise UserError(f"--axis {self.axes[0].name}: an axis is given twice")
        size = math.prod(len(a.values) for a in self.axes)
        if size > MAX_CELLS:
            shape = " x ".join(str(len(a.values)) for a in self.axes)
            raise UserError(f"--axis: the grid has {size} cells ({shape}), more than the {MAX_CELLS} a sweep runs")
        missing = [p for p in self.placeholders if p not in names]
        if missing:
            raise UserError(f"--serve-cmd has {{{missing[0]}}} but no --axis {missing[0]}=... fills it")

    @property
    def placeholders(self) -> list[str]:
        if self.serve_cmd is None:
            return []
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(self.serve_cmd) if f is not None]
        except ValueError as e:
            raise UserError(f"--serve-cmd: cannot read its placeholders: {e}") from None
        bad = [f for f in fields if not _NAME.match(f)]
        if bad:
            raise UserError(f"--serve-cmd: {{{bad[0]}}} is not a placeholder name (write {{{{ for a brace)")
        return fields

    def cells(self) -> list[Cell]:
        """Every combination, the base cell (first values) first."""
        combos = itertools.product(*(a.values for a in self.axes))
        return [Cell(tuple((a.name, v) for a, v in zip(self.axes, combo, strict=True))) for combo in combos]

    @property
    def base(self) -> Cell:
        return Cell(tuple((a.name, a.values[0]) for a in self.axes))

    def run_args(self, cell: Cell) -> list[str]:
        """The `run` flags this cell adds: its engine axes as flags, and the filled `--serve-cmd`."""
        served = set(self.placeholders)
        args: list[str] = []
        for axis, value in cell.values:
            key = axis.replace("-", "_")
            if key in served:
                continue
            flag = axis.replace("_", "-")
            if value.text in SWITCH:
                args.append(f"--{SWITCH[value.text]}{flag}")
            else:
                args += [f"--{flag}", value.text]
        if self.serve_cmd is not None:
            fill = {axis.replace("-", "_"): v.text for axis, v in cell.values}
            args += ["--serve-cmd", self.serve_cmd.format(**fill)]
        return args
