"""The accuracy test's declaration: a task's score against its reference, recorded as the task entry's own verdict."""

from .declaration import GateDeclaration

GATE = GateDeclaration(name="accuracy", key=None, judged_in="accuracy_gate", fail_words="score below its threshold")
