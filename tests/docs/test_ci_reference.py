"""The CI users' reference explains every verdict word the code can print."""

from __future__ import annotations

from specdec_eval.evals.sequential import discordant_pairs
from specdec_eval.evals.sweep import drift, judge
from specdec_eval.results.decide import KEEP, UNWAIVE, WAIVE
from specdec_eval.results.run_summary import Verdict
from specdec_eval.results.waives import MARKERS
from specdec_eval.stats import acceptance_ratio

from .helpers import REPO


def code_words() -> set[str]:
    words = {str(v) for v in Verdict}
    words |= {judge.PASS, judge.FAIL, judge.BASE, judge.NOT_RUN, judge.UNJUDGED}
    words |= {drift.DECAY, drift.NO_TREND, drift.TOO_FEW}
    words |= {discordant_pairs.B_WORSE, discordant_pairs.NO_DIFFERENCE}
    words |= {acceptance_ratio.DROP, acceptance_ratio.NO_DROP, acceptance_ratio.INCONCLUSIVE}
    words |= {WAIVE, UNWAIVE, KEEP, *MARKERS}
    return words


def test_every_verdict_word_is_on_the_ci_page():
    page = (REPO / "docs" / "reference" / "ci.md").read_text()
    missing = sorted(w for w in code_words() if f"`{w}`" not in page)
    assert not missing, f"docs/reference/ci.md does not explain: {missing}"
