"""The CI time budget, kept visible in every run's output: `.ci/run` (setup and tests, from a fresh clone) must end
within 40 minutes on a 2-core machine. A test whose setup, call and teardown together take more than its share,
TEST_SHARE_S, is named at the end of the run, slowest first, with the suite's own time against SUITE_BUDGET_S.

TEST_SHARE_S: about 1/25 of the budget; a test this slow must say in its docstring why it needs that long (as the
ones named today do). SPECDEC_TEST_SHARE_S overrides it (e.g. 0 to list every test). A session-scoped fixture's
setup (a model load, a server start) counts towards the first test that asks for it (on each xdist worker).

Under pytest-xdist the controller receives every worker's reports, so the names and seconds are the same as in a
serial run; the wall time is the controller's, and the seconds in tests are summed over the workers."""

from __future__ import annotations

import os
import time
from collections import defaultdict

SUITE_BUDGET_S = 40 * 60  # .ci/run, setup included
TEST_SHARE_S = float(os.environ.get("SPECDEC_TEST_SHARE_S", 90))


class Budget:
    """Per-test seconds (all phases) and the session's wall time; the closing section of the terminal summary."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_terminal_summary(self, terminalreporter) -> None:
        wall = time.monotonic() - self.started
        over = sorted(((s, n) for n, s in self.seconds.items() if s > TEST_SHARE_S), reverse=True)
        tr = terminalreporter
        workers = getattr(tr.config.option, "numprocesses", None)  # pytest-xdist's -n; None or 0 when serial
        tr.section("time budget")
        tr.write_line(f"{len(over)} test(s) over their share of {TEST_SHARE_S:.0f} s (setup + call + teardown):")
        for seconds, nodeid in over:
            tr.write_line(f"  {seconds:7.1f} s  {nodeid}")
        tr.write_line(
            f"tests: {wall:.0f} s wall ({wall / 60:.1f} min) of the {SUITE_BUDGET_S // 60}-minute CI budget "
            f"(setup not counted here; .ci/run prints the whole), {sum(self.seconds.values()):.0f} s in tests"
            + (f" on {workers} workers" if workers else "")
        )
