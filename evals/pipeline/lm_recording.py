"""What an evaluation keeps while lm-eval asks the adapter (`lm_adapter`) for answers: each request's engine output
by (task, document) through a wrapper around the adapter (`RecordingLM`, lm-eval's CachingLM shape: a wrapper, not a
flag) into an `OutputRecord`; each finished output in the run's generation cache as it finishes (`RecordingSink`,
for resume); and a live score for the progress line (`RunningScore`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lm_eval.api.model import LM

from ...workers.config import SamplingParams
from ...workers.interface import GenerationOutput, OutputSink, Prompt
from ..tasks.registry import task_for_lm_eval_name

if TYPE_CHECKING:
    from .lm_adapter import SpecDecLM

DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's own backends default to this when a task names no max_gen_toks
# lm-eval spells the same limit four ways (lm_eval.models.utils.normalize_gen_kwargs); first one present wins.
_MAX_TOKEN_KEYS = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")


def sampling_from_gen_kwargs(gen_kwargs: dict[str, Any], default_max: int) -> SamplingParams:
    """An lm-eval request's generation kwargs as our SamplingParams (greedy unless do_sample)."""
    kwargs = dict(gen_kwargs)
    until = kwargs.pop("until", None) or []
    until = [until] if isinstance(until, str) else list(until)
    max_new = next((int(kwargs[k]) for k in _MAX_TOKEN_KEYS if kwargs.get(k) is not None), default_max)
    do_sample = bool(kwargs.get("do_sample", False))
    temperature = float(kwargs.get("temperature", 0.0) or 0.0) if do_sample else 0.0
    return SamplingParams(
        max_new_tokens=max_new,
        temperature=temperature,
        top_p=float(kwargs.get("top_p", 1.0) or 1.0),
        top_k=int(kwargs.get("top_k", 0) or 0),
        stop=tuple(s for s in until if s),
    )


class OutputRecord:
    """Each request's engine output by (lm-eval task, document, repeat: which of the document's samples), and the
    documents a run skipped: what a run's per-sample records are built from."""

    def __init__(self) -> None:
        self._outputs: dict[tuple[str, int, int], GenerationOutput] = {}
        self._sampling: dict[tuple[str, int, int], SamplingParams] = {}
        self._skipped: set[tuple[str, int]] = set()

    def add(
        self, task: str, doc_id: int, output: GenerationOutput, repeat: int = 0, sampling: SamplingParams | None = None
    ) -> None:
        if output.finish_reason == "skipped":  # an early stop, or a document the run does not evaluate
            self._skipped.add((task, doc_id))
        else:
            self._outputs[(task, doc_id, repeat)] = output
            if sampling is not None:
                self._sampling[(task, doc_id, repeat)] = sampling

    def get(self, task: str, doc_id: int, repeat: int = 0) -> GenerationOutput | None:
        return self._outputs.get((task, doc_id, repeat))

    def sampling(self, task: str, doc_id: int, repeat: int = 0) -> SamplingParams | None:
        """The parameters the document's output was sampled with (None: not recorded)."""
        return self._sampling.get((task, doc_id, repeat))

    def is_skipped(self, task: str, doc_id: int) -> bool:
        return (task, doc_id) in self._skipped


class RecordingLM(LM):
    """The adapter as lm-eval sees it, every engine output kept in `record` as it answers (lm-eval's CachingLM
    shape: a wrapper around the model, not a flag on it); everything else is the wrapped adapter's."""

    def __init__(self, inner: SpecDecLM, record: OutputRecord) -> None:
        super().__init__()
        self.inner, self.record = inner, record

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        outputs = self.inner.outputs_for(requests)
        for req, out, r in zip(requests, outputs, self.inner.repeat_indices(requests), strict=True):
            # the adapter's own reading of the request (its length limit aside: a record keeps the distribution's)
            sampling = sampling_from_gen_kwargs(req.args[1], DEFAULT_MAX_GEN_TOKS)
            self.record.add(req.metadata[0], self.inner.doc_id(req), out, r, sampling)
        return self.inner.answers(requests, outputs)

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self.inner.loglikelihood(requests, disable_tqdm)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        return self.inner.loglikelihood_rolling(requests, disable_tqdm)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.inner.apply_chat_template(chat_history, add_generation_prompt)

    @property
    def tokenizer_name(self) -> str:
        return self.inner.tokenizer_name

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.inner.chat_template(chat_template)

    def get_model_info(self) -> dict[str, Any]:
        return self.inner.get_model_info()

    def __getattr__(self, name: str) -> Any:  # any other attribute lm-eval reads of its model is the adapter's
        if name == "inner":  # not set yet (during construction)
            raise AttributeError(name)
        return getattr(self.inner, name)


class RecordingSink:
    """Each finished output goes to the run's generation cache (for resume) and to the running score. Replica
    leaders of a torchrun job write through their own cache writer; the running score is rank 0's."""

    def __init__(self, cache: Any, running: RunningScore | None, todo: list[int]) -> None:
        self.cache, self.running, self.todo = cache, running, todo

    def put(self, prompt: Prompt, sampling: SamplingParams, output: GenerationOutput) -> None:
        if self.running is not None:
            self.running.add(self.todo[output.index], output.text)
        if self.cache is not None:
            self.cache.put(prompt, sampling, output)

    def for_replica(self, rank: int) -> OutputSink:
        return RecordingSink(self.cache.for_replica(rank) if self.cache is not None else None, None, self.todo)


class RunningScore:
    """A live score for the progress line while generation runs, on the outputs finished so far: each request's
    task family judges its output (`TaskFamily.live_correct`). Only a progress hint: the reported score is lm-eval's."""

    def __init__(self, requests: list[tuple[str, Any]]) -> None:
        """requests: (lm-eval task name, document) of each request, in order."""
        self.requests = requests
        self.correct: dict[int, bool] = {}

    def add(self, i: int, text: str) -> None:
        task, doc = self.requests[i] if i < len(self.requests) else ("", None)
        spec = task_for_lm_eval_name(task)
        verdict = spec.family.live_correct(text, doc) if spec is not None else None
        if verdict is not None:
            self.correct[i] = verdict

    @property
    def score(self) -> float | None:
        return 100.0 * sum(self.correct.values()) / len(self.correct) if self.correct else None

    def wrap(self, progress: Callable | None) -> Callable | None:
        if progress is None:
            return None

        def update(done: int, total: int, stats) -> None:
            stats.running_score = self.score
            progress(done, total, stats)

        return update
