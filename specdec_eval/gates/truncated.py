"""The opt-in truncated gate's declaration (`run --gate truncated[=SHARE]`): the share of a task's outputs cut off at
the output-length limit."""

from .declaration import GateDeclaration

GATE = GateDeclaration(
    name="truncated", key="truncated", judged_in="truncated", fail_words="too many outputs cut off", opt_in=True
)
