"""The lossless gate's declaration: spec-dec outputs against their non-speculative baseline."""

from .declaration import GateDeclaration

GATE = GateDeclaration(
    name="lossless", key="lossless", judged_in="lossless_gate", fail_words="outputs differ from the baseline"
)
