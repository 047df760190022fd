"""When a server stops answering: the run should end quickly and say why, not wait `timeout x retries` for every
remaining document (TensorRT-LLM's dead executor loop keeps accepting requests and never answers them, while /health
still says 200).

`StallWatch` decides from the answers seen so far. The server has stalled when, with requests in flight,
- nothing has been answered for longer than every request in flight may take: a request's own limit is `factor` x
  the slowest time per output token seen so far x the tokens it may produce (its `max_new_tokens`), and never less
  than `factor` x the slowest answer so far nor `floor_s`; or
- the server's log said its engine died (a fatal signature) and nothing was answered for `fatal_grace_s` since, or
- the server process the run started has exited.
While the server answers other requests it has not stalled, however long one request takes (a long reasoning output
takes minutes where a short answer took a fraction of a second; its own timeout still applies). Before the first
answer there is no scale: only the log, the process, and each request's own timeout can tell."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import UserError

DEFAULT_STALL_FACTOR = 10.0
DEFAULT_STALL_FLOOR_S = 60.0


@dataclass(frozen=True)
class StallPolicy:
    factor: float = DEFAULT_STALL_FACTOR
    floor_s: float = DEFAULT_STALL_FLOOR_S
    fatal_grace_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.factor > 1:
            raise UserError(f"the stall factor must be > 1, got {self.factor}")
        if not self.floor_s > 0:
            raise UserError(f"the stall floor must be positive, got {self.floor_s}")


@dataclass(frozen=True)
class Stall:
    reason: str  # one line: what was seen
    waited_s: float  # since the last answer (or since the run began, before any)


class StallWatch:
    """Feed it the run's answers (`answered`); ask it with the requests in flight (`check`). `budgets`: each
    request's output limit in tokens, by request index (a request without one is judged by the slowest answer).
    Times are `time.monotonic()` seconds, passed in so tests can drive it."""

    def __init__(self, policy: StallPolicy, now: float, budgets: Mapping[int, int] | None = None) -> None:
        self.policy = policy
        self.began = now
        self.budgets = dict(budgets or {})
        self.last_answer: float | None = None
        self.slowest = 0.0
        self.slowest_per_token = 0.0
        self.answers = 0

    def answered(self, latency_s: float, now: float, tokens: int | None = None) -> None:
        """Any answer, an error included: the server is still answering. `tokens`: the output tokens it carried (an
        answer with none sets no per-token scale: its time was not spent producing tokens)."""
        self.answers += 1
        self.slowest = max(self.slowest, latency_s)
        if tokens:
            self.slowest_per_token = max(self.slowest_per_token, latency_s / tokens)
        self.last_answer = now

    def limit_s(self, index: int) -> float:
        """How long request `index` may go unanswered before it counts as stalled: scaled by its own output limit."""
        budget = self.budgets.get(index, 0)
        return max(
            self.policy.floor_s, self.policy.factor * self.slowest, self.policy.factor * self.slowest_per_token * budget
        )

    def check(
        self, now: float, in_flight: Mapping[int, float], fatal_seen_at: float | None = None, exited: int | None = None
    ) -> Stall | None:
        """in_flight: request index -> when it started; fatal_seen_at: when a fatal log line was first seen;
        exited: the exit status of the server process the run started, once it has exited."""
        since = now - (self.last_answer if self.last_answer is not None else self.began)
        if exited is not None:
            return Stall(f"the server process exited with status {exited}", since)
        if not in_flight:
            return None
        if fatal_seen_at is not None:
            quiet = now - max(fatal_seen_at, self.last_answer or fatal_seen_at)
            if quiet >= self.policy.fatal_grace_s:
                return Stall(
                    f"its log says the engine died, and nothing was answered in the {quiet:.1f} s since", since
                )
        if self.answers == 0:
            return None
        # Each request in flight is owed its own limit, counted from when it started or from the last answer,
        # whichever is later: an answer to anything shows the server still works.
        waits = {i: now - max(started, self.last_answer) for i, started in in_flight.items()}
        if any(wait <= self.limit_s(i) for i, wait in waits.items()):
            return None
        longest = max(in_flight, key=self.limit_s)
        return Stall(
            f"no request was answered for {since:.1f} s while {len(in_flight)} were in flight, each past its "
            f"own limit (the longest {self.limit_s(longest):.1f} s: {self.policy.factor:g}x the slowest "
            f"answer so far, {self.slowest:.2f} s, or per output token, {self.slowest_per_token:.3g} s, "
            f"times its budget; at least {self.policy.floor_s:g} s)",
            since,
        )


def time_without_watch(
    timeout_s: float, retries: int, unanswered: int, concurrency: int, max_backoff_s: float = 10.0
) -> float:
    """What the same unanswered documents cost without the watch: each waits `timeout_s` per attempt, `1 + retries`
    attempts (a timeout is retried) with the backoff between them (`client.requests`: 0.5 x 2^(n-1)
    s, within 1..10), `concurrency` documents at a time."""
    backoff = sum(min(max_backoff_s, max(1.0, 0.5 * 2.0 ** (n - 1))) for n in range(1, retries + 1))
    per_document = (1 + retries) * timeout_s + backoff
    rounds = -(-unanswered // concurrency)
    return rounds * per_document
