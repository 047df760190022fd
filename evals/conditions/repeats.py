"""Several samples per document (lm-eval's `repeats`): each sample's seed, and when repeats make sense.

**Seeds.** Sample r of document d of task t is decoded with its own seed, `sample_seed(seed, t, d, r)`: a hash of the
four, so it depends on nothing else (not the batch, the order, the rank or the other documents). Two runs with the
same evaluation seed therefore draw the same random stream for the same (document, repeat): a spec-dec run and its
baseline, or the two commits of `ab`, are paired sample by sample, and our coupled sampler gives identical tokens
where the engines agree.

**How lm-eval scores repeats.** A task with `repeats: N` sends every request N times (evaluator.py clones each
Instance) and hands the N answers of a document to the task's filters as one list; `take_first` (the last step of
every GSM8K and GPQA filter, and the default when a task names none) keeps answer 0 and drops the rest, and
`majority_vote` + `take_first` (gsm8k-cot-self-consistency) scores the most common extracted answer (maj@N). Neither
is what a reference measured with one sample per question estimates.

**Our score with N samples per document** is the mean over documents of each document's mean correctness over its
samples (every sample scored by the task's filters on its own): avg@N, an unbiased estimate of the same single-sample
accuracy the reference estimates, with less variance. Its standard error comes from the spread of the per-document
means, not from the N x D samples as if independent: stats.clustered.

**Greedy runs** refuse N > 1: N greedy samples of a question are N copies of one answer.
"""

from __future__ import annotations

import hashlib

from ...errors import UserError

MAX_REPEATS = 64  # lm-eval's self-consistency task uses 64; more is a typo or a different experiment


def sample_seed(eval_seed: int, task: str, doc_id: int | str, repeat: int) -> int:
    """The seed of sample `repeat` of document `doc_id` of `task`: 63 bits of SHA-256 over the four."""
    if repeat < 0:
        raise ValueError(f"repeat index must be >= 0, got {repeat}")
    digest = hashlib.sha256(f"{eval_seed}\x1f{task}\x1f{doc_id}\x1f{repeat}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def check_repeats(repeats: int, temperature: float) -> None:
    """UserError (one line) when `repeats` is not a sample count a run can use at this temperature."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise UserError(f"--repeats must be a whole number in 1..{MAX_REPEATS}, got {repeats!r}")
    if repeats > 1 and temperature == 0:
        raise UserError(
            f"--repeats {repeats} with greedy decoding gives {repeats} copies of one answer per question; "
            "sample (--gen-kwargs temperature=...) or drop --repeats"
        )
