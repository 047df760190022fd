"""Our engine as an lm-eval `LM`. Every generate_until request of every task goes to the engine in one call
(continuous batching over all of them); outputs come back in request order, as lm-eval requires.

Any `InferenceEngine` works: the local engine, the torchrun one, or an HTTP endpoint. What an
evaluation wants (limits, logprobs, caches, which documents, a sequential stop) is one frozen `LMSession` given at
construction; nothing is set or read back afterwards: the outputs are kept by a wrapper (`lm_recording`).

Registered as `specdec`: `specdec-eval lm-eval run --model specdec --model_args model=smollm2,spec=eagle3 ...`
(lm-eval has no plugin discovery, so its own `lm_eval` executable only sees models it imports itself; our
`lm-eval` subcommand imports this module first, then hands over to lm-eval's command line). `--model_args` keys
are the command-line flags' names (`kv_cache=v2,spec=eagle3,draft_len=3`), built by the one config builder.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from ...errors import UserError
from ...results.paired import first_divergence
from ...workers.config import EngineConfig, SamplingParams
from ...workers.engine.engine import Engine
from ...workers.engine_options import from_options
from ...workers.interface import GenerationOutput, InferenceEngine
from ...workers.loading.chat_template import ChatTemplateKwargs
from ..conditions.repeats import sample_seed
from .lm_recording import DEFAULT_MAX_GEN_TOKS, RecordingSink, RunningScore, sampling_from_gen_kwargs


@dataclass(frozen=True)
class SequentialStop:
    """Evaluate batch by batch in each task's order and stop a task as soon as a gate decides (--early-stop)."""

    stopper: Any  # evals.sequential.early_stop.EarlyStop: the controller (its state is the run's looks)
    references: Mapping[str, Any]  # lm-eval task name -> its reference (None: none)
    # (task, doc id, repeat) -> the baseline's tokens of that sample (the same seed), if known
    baseline_tokens: Callable[[str, int, int], Any] | None = None


@dataclass(frozen=True)
class LMSession:
    """Everything an evaluation tells the adapter, fixed when it is built: what to generate and how, and for which
    documents (every planned one, `only` these, or `sequential`ly until a gate decides)."""

    max_gen_toks: int | Mapping[str, int] = DEFAULT_MAX_GEN_TOKS  # one limit, or per lm-eval task name
    logprobs: int | None = None  # record each output token's logprob and top alternatives (the lossless margins)
    # The run pipeline records failed requests itself (and fails the run); anywhere else (lm-eval's own command
    # line, a notebook) a failed request raises: it never reaches lm-eval as an answer.
    record_failures: bool = False
    progress: Callable | None = None
    cache: Any = None  # evals.pipeline.resume.GenerationCache: finished generations of this run, for resume
    pair_cache: Any = None  # paired decoding: the baseline run's GenerationCache gets the plain twins' outputs
    tasks: Mapping[str, Any] = field(default_factory=dict)  # lm-eval task name -> Task (its filters score early)
    plans: Mapping[str, Any] = field(default_factory=dict)  # lm-eval task name -> SubsetPlan (documents, order)
    only: frozenset[tuple[str, int]] | None = None  # evaluate just these (task, doc id); skip the others
    sequential: SequentialStop | None = None
    # Sampled requests: sample r of document d of task t draws with sample_seed(base, t, d, r), whatever the batch
    # (`repeats`). None: the engine's own per-request seeds (lm-eval's command line).
    sample_seed_base: int | None = None
    template_kwargs: ChatTemplateKwargs = field(default_factory=ChatTemplateKwargs)  # --chat-template-kwargs


@register_model("specdec")
class SpecDecLM(LM):
    def __init__(
        self, engine: InferenceEngine | None = None, session: LMSession | None = None, **engine_args: Any
    ) -> None:
        """engine: any InferenceEngine (else one built from `engine_args`, lm-eval's --model_args); session: what to
        generate and for which documents."""
        super().__init__()
        self.engine = engine if engine is not None else Engine.build(engine_config_from_args(engine_args))
        self.session = session or LMSession()

    @property
    def max_gen_toks(self) -> int | Mapping[str, int]:
        return self.session.max_gen_toks

    def doc_id(self, req) -> int:
        """The document index of a request (lm-eval numbers a random subset's documents by position)."""
        plan = self.session.plans.get(req.metadata[0])
        return plan.doc_id(int(req.metadata[1])) if plan is not None else int(req.metadata[1])

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> SpecDecLM:
        args = dict(kv.split("=", 1) for kv in arg_string.split(",") if kv.strip())
        return cls.create_from_arg_obj(args, additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> SpecDecLM:
        args = dict(arg_dict)
        # lm-eval's own --device / --batch_size defaults are meant for its HF backend; ours come from model_args.
        ignored = ("batch_size", "max_batch_size", "device")
        args.update({k: v for k, v in (additional_config or {}).items() if v is not None and k not in ignored})
        limit = args.pop("max_gen_toks", DEFAULT_MAX_GEN_TOKS)
        return cls(session=LMSession(max_gen_toks=int(limit)), **args)

    # --- generation ------------------------------------------------------------------------------------

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        return self.answers(requests, self.outputs_for(requests))

    def outputs_for(self, requests) -> list[GenerationOutput]:
        """The engine's output of each request, in request order (a document the run skips: finish reason
        "skipped")."""
        if not requests:
            return []
        prompts = [req.args[0] for req in requests]
        sampling = [
            replace(
                sampling_from_gen_kwargs(req.args[1], self._max_for(req.metadata[0])), logprobs=self.session.logprobs
            )
            for req in requests
        ]
        base = self.session.sample_seed_base
        if base is not None:
            repeats = self.repeat_indices(requests)
            sampling = [
                s if s.greedy else replace(s, seed=sample_seed(base, req.metadata[0], self.doc_id(req), r))
                for s, req, r in zip(sampling, requests, repeats, strict=True)
            ]
        self.running = RunningScore([(req.metadata[0], getattr(req, "doc", None)) for req in requests])
        if self.session.only is not None:
            return self._generate_only(requests, prompts, sampling)
        if self.session.sequential is None:
            return self._generate(prompts, sampling)
        return self._generate_sequentially(requests, prompts, sampling)

    def repeat_indices(self, requests) -> list[int]:
        """Which sample of its document each request is: lm-eval sends a task's `repeats` copies of a request in
        one list (evaluator.py), so the r-th request of a (task, document) is its sample r."""
        seen: dict[tuple[str, int], int] = {}
        out = []
        for req in requests:
            key = (req.metadata[0], self.doc_id(req))
            out.append(seen.get(key, 0))
            seen[key] = out[-1] + 1
        return out

    def answers(self, requests, outputs: list[GenerationOutput]) -> list[str]:
        """What lm-eval gets: each output's text. A failed request raises, unless the run records failures itself
        (it then marks those samples failed and fails the run; lm-eval gets a placeholder it never reports)."""
        failed = [(req, out) for req, out in zip(requests, outputs, strict=True) if out.finish_reason == "error"]
        if failed and not self.session.record_failures:
            req, out = failed[0]
            raise RequestsFailed(
                f"{len(failed)} of {len(outputs)} requests failed (first: task {req.metadata[0]} doc "
                f"{req.metadata[1]}: {out.error}); a failed request is never scored as an answer"
            )
        return [out.text if out.finish_reason != "error" else "" for out in outputs]

    def _generate(self, prompts: list, sampling: list[SamplingParams]) -> list[GenerationOutput]:
        """Reuse outputs this run already finished (resume); generate the rest, persisting each as it finishes."""
        session = self.session
        cached = [session.cache.get(p, s) if session.cache else None for p, s in zip(prompts, sampling, strict=True)]
        if session.pair_cache is not None:  # a pair is generated again unless both of its outputs are kept
            paired = [session.pair_cache.get(p, s) for p, s in zip(prompts, sampling, strict=True)]
            cached = [c if b is not None else None for c, b in zip(cached, paired, strict=True)]
        todo = [i for i, c in enumerate(cached) if c is None]
        running = getattr(self, "running", None) or RunningScore([])
        for i, c in enumerate(cached):
            if c is not None:
                running.add(i, c.text)
        fresh: list[GenerationOutput] = []
        if todo:
            sink = RecordingSink(session.cache, running, todo)
            args = ([prompts[i] for i in todo], [sampling[i] for i in todo], running.wrap(session.progress), sink)
            if session.pair_cache is not None:
                fresh, _ = self.engine.generate_paired(*args, session.pair_cache)
            else:
                fresh = self.engine.generate(*args)
        for i, out in zip(todo, fresh, strict=True):
            cached[i] = out
        return cached  # type: ignore[return-value]

    def _generate_sequentially(self, requests, prompts: list, sampling: list[SamplingParams]) -> list[GenerationOutput]:
        """Each task's documents in its evaluation order, a batch of documents per task at a time (each with all of
        its samples: lm-eval's repeats), with a look after each batch; a task the stopper decided gets no more
        requests (its remaining outputs are "skipped")."""
        from collections import deque

        stopper = self.session.sequential.stopper
        repeats = self.repeat_indices(requests)
        documents: dict[str, dict[int, list[int]]] = {}  # task -> doc id -> its requests, by repeat
        for i, req in enumerate(requests):
            documents.setdefault(req.metadata[0], {}).setdefault(self.doc_id(req), []).append(i)
        pending = {}
        for task, docs in documents.items():
            plan = self.session.plans[task]
            per_doc = {len(rows) for rows in docs.values()}
            if len(per_doc) != 1:
                raise RuntimeError(f"{task}: documents with different sample counts ({sorted(per_doc)})")
            pending[task] = deque(docs[d] for d in sorted(docs, key=plan.position))
            stopper.start(task, len(docs), per_doc.pop())
        outputs: list[GenerationOutput | None] = [None] * len(requests)
        while True:
            chunk = [
                i
                for t in pending
                if stopper.is_open(t)
                for _ in range(min(stopper.batch, len(pending[t])))
                for i in pending[t].popleft()
            ]
            if not chunk:
                break
            for i, out in zip(
                chunk, self._generate([prompts[i] for i in chunk], [sampling[i] for i in chunk]), strict=True
            ):
                outputs[i] = out
                self._observe(requests[i], prompts[i], sampling[i], out, repeats[i])
            for task in {requests[i].metadata[0] for i in chunk}:
                stopper.after_batch(task)
        return [out if out is not None else _skipped(i) for i, out in enumerate(outputs)]

    def _generate_only(self, requests, prompts: list, sampling: list[SamplingParams]) -> list[GenerationOutput]:
        keep = [i for i, r in enumerate(requests) if (r.metadata[0], self.doc_id(r)) in self.session.only]
        outputs = [_skipped(i) for i in range(len(requests))]
        for i, out in zip(keep, self._generate([prompts[i] for i in keep], [sampling[i] for i in keep]), strict=True):
            outputs[i] = out
        return outputs

    def _observe(self, req, prompt, params: SamplingParams, out: GenerationOutput, repeat: int = 0) -> None:
        """Score a finished sample and compare it with its baseline: the paired twin decoded with the same prompt
        and parameters (the seed of its document and repeat), or the recorded baseline's sample of the same (task,
        document, repeat)."""
        from ..sequential.early_stop import sample_score

        sequential, session = self.session.sequential, self.session
        task, doc_id = req.metadata[0], self.doc_id(req)
        ref = sequential.references.get(task)
        score = sample_score(session.tasks[task], req, out.text, ref.score_filter if ref is not None else None)
        baseline = None
        if session.pair_cache is not None:
            twin = session.pair_cache.get(prompt, params)
            baseline = twin.token_ids if twin is not None else None
        elif sequential.baseline_tokens is not None:
            baseline = sequential.baseline_tokens(task, doc_id, repeat)
        divergence = first_divergence(out.token_ids, baseline) if baseline is not None else None
        plan = session.plans[task]
        sequential.stopper.observe(
            task, plan.position(doc_id), score, out.stats.get("acceptance"), divergence, doc_id, repeat
        )

    def _max_for(self, task: str) -> int:
        limit = self.session.max_gen_toks
        return limit.get(task, DEFAULT_MAX_GEN_TOKS) if isinstance(limit, Mapping) else int(limit)

    # --- scoring ---------------------------------------------------------------------------------------

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self.engine.score([self._split_encode(*req.args) for req in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        results = []
        for req in requests:
            (text,) = req.args
            ids = self.engine.tokenizer.encode(text, add_special_tokens=False)
            prefix = [self.engine.tokenizer.bos_token_id or sorted(self.engine.eos_ids)[0]]
            results.append(self.engine.score([(prefix, ids)])[0][0])
        return results

    def _split_encode(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Encode the whole string and split at the context's length, so a word-initial space tokenizes as it
        would in running text (lm-eval's own convention)."""
        spaces = len(context) - len(context.rstrip())
        if spaces:  # move trailing spaces of the context onto the continuation
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.engine.encode(context + continuation)
        context_ids = self.engine.encode(context) if context else []
        return whole[: len(context_ids)], whole[len(context_ids) :]

    # --- chat ------------------------------------------------------------------------------------------

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        tokenizer = self.engine.tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise UserError("--apply-chat-template: this model's tokenizer has no chat template")
        extra = self.session.template_kwargs.as_dict()  # --chat-template-kwargs: the template's own variables
        return str(
            tokenizer.apply_chat_template(
                chat_history, add_generation_prompt=add_generation_prompt, tokenize=False, **extra
            )
        )

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.engine.tokenizer, "name_or_path", "") or self.engine.identity.model).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.engine.tokenizer, "chat_template", None) if chat_template else None

    def get_model_info(self) -> dict[str, Any]:
        i = self.engine.identity
        return {"model": i.model, "kv_cache": i.kv_cache, "spec": i.spec}


def _skipped(index: int) -> GenerationOutput:
    """A document the run did not evaluate (an early stop): lm-eval gets a placeholder it never reports."""
    return GenerationOutput(index=index, prompt_token_ids=[], token_ids=[], text="", finish_reason="skipped")


class RequestsFailed(RuntimeError):
    """The engine could not complete some requests (after its retries)."""


def engine_config_from_args(args: dict[str, Any]) -> EngineConfig:
    """EngineConfig from lm-eval `--model_args` strings, keyed like the command-line flags (model, kv_cache, dtype,
    device, device_memory, spec, draft_len, draft_model, max_batch_size, max_seq_len, seed, ...); each value is
    converted to the type its flag takes."""
    # One lm-eval process is one engine: tensor parallelism needs `specdec-eval run --gpus N`.
    params = [p for p in inspect.signature(from_options).parameters if p != "tp"]
    hints = typing.get_type_hints(from_options)
    unknown = set(args) - set(params)
    if unknown:
        raise UserError(f"unknown specdec model_args: {', '.join(sorted(unknown))}; known: {', '.join(params)}")
    return from_options(**{k: _convert(k, v, hints[k]) for k, v in args.items()})


def _convert(key: str, value: Any, hint: Any) -> Any:
    """A --model_args string as the builder's parameter type (int, bool, str, optional, a list of strings)."""
    if not isinstance(value, str):
        return value
    kinds = [t for t in typing.get_args(hint) or (hint,) if t is not type(None)]
    if value.lower() in ("", "none") and type(None) in typing.get_args(hint):
        return None
    kind = kinds[0]
    try:
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if kind is int:
            return int(value)
        if typing.get_origin(kind) is not None:  # Sequence[str]: several values separated by '|'
            return tuple(v for v in value.split("|") if v)
        return value
    except ValueError:
        raise UserError(f"specdec model_args {key}={value!r}: expected {getattr(kind, '__name__', kind)}") from None
