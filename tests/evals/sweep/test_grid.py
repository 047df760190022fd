"""The sweep's grid: axes parsed from the command line, their product as cells (the base first), and the `run`
flags and filled server command of each cell."""

from __future__ import annotations

import pytest
from specdec_eval.evals.sweep.grid import Axis, Grid

from specdec_eval.errors import UserError


def test_cells_are_the_product_with_the_base_first_and_become_run_flags():
    grid = Grid((Axis.parse("batch=1,4"), Axis.parse("kv-cache=v1,v2"), Axis.parse("block-reuse=on,off")))
    cells = grid.cells()
    assert len(cells) == 8 and cells[0] == grid.base
    assert grid.base.name == "batch=1 kv-cache=v1 block-reuse=on"
    assert grid.run_args(cells[0]) == ["--batch", "1", "--kv-cache", "v1", "--block-reuse"]
    assert grid.run_args(cells[-1]) == ["--batch", "4", "--kv-cache", "v2", "--no-block-reuse"]
    assert len({c.slug for c in cells}) == 8


def test_a_server_template_is_filled_per_cell_and_labels_stand_for_switches():
    axes = (Axis.parse("max_num_seqs=1,4"), Axis.parse("prefix_caching=on:--enable-pc,off:--no-enable-pc"))
    grid = Grid(axes, "serve --max-num-seqs {max_num_seqs} {prefix_caching} --port 9")
    last = grid.cells()[-1]
    assert last.labels() == {"max_num_seqs": "4", "prefix_caching": "off"}
    assert grid.run_args(last) == ["--serve-cmd", "serve --max-num-seqs 4 --no-enable-pc --port 9"]


@pytest.mark.parametrize(
    "axes, template, message",
    [
        (("batch",), None, "expected NAME=V1,V2"),
        (("batch=1,1",), None, "appears twice"),
        (("batch=1,4", "batch=2"), None, "given twice"),
        (("batch=1,4",), "serve {max_num_seqs}", "no --axis max_num_seqs"),
        ((), None, "at least one --axis"),
    ],
)
def test_bad_axes_are_one_line_errors(axes, template, message):
    with pytest.raises(UserError, match=message):
        Grid(tuple(Axis.parse(a) for a in axes), template)
