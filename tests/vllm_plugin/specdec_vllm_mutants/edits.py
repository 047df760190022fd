"""What each planted class does to one request's verified tokens, as pure functions on token lists (no vLLM, no
torch), so the edits are tested on hand-made rows without a server.

A row is what vLLM's rejection sampler emits for one request in one step: the accepted drafts, then either the
target's token at the first rejected position or, when every draft was accepted, the bonus token."""

from __future__ import annotations

ROW_EDITS = ("emit_rejected_draft", "drop_accepted", "duplicate_accepted")


def edit_row(name: str, row: list[int], drafts: list[int]) -> list[int]:
    """The row as the planted class `name` emits it; `drafts`: the request's draft tokens this step. A row never
    grows past len(drafts) + 1 tokens, what vLLM's scheduler makes room for."""
    accepted = len(row) - 1  # drafts the target agreed with
    if name == "emit_rejected_draft":
        # greedy: the draft the target rejected is emitted in place of the target's own token
        return row[:-1] + [drafts[accepted]] if accepted < len(drafts) else row
    if name == "drop_accepted":
        return row[1:] if accepted >= 1 else row
    if name == "duplicate_accepted":
        # the first accepted token twice; with no room left (every draft accepted) the bonus token falls off
        if accepted < 1:
            return row
        longer = row[:1] + row
        return longer if len(longer) <= len(drafts) + 1 else longer[:-1]
    raise ValueError(f"not a row edit: {name}")


def never_matching(drafts: list[int]) -> list[int]:
    """Each draft moved to the previous token id (0 to 1), as a draft-to-target vocabulary map read one entry off
    would: the target (almost) never agrees, so acceptance collapses while every output stays the target's."""
    return [t - 1 if t > 0 else 1 for t in drafts]
