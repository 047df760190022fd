"""The acceptance gate's declaration: the acceptance length against its reference band (a PASS within a band wider
than min_al does not rule out the drop it exists for)."""

from .declaration import GateDeclaration

GATE = GateDeclaration(
    name="acceptance",
    key="acceptance_gate",
    judged_in="acceptance_gate",
    fail_words="acceptance length out of its band",
    underpowerable=True,
)
