"""Our engine as an lm-eval `LM`. Every generate_until request of every task goes to the engine in one call
(continuous batching over all of them); outputs come back in request order, as lm-eval requires.

Registered as `specdec`: `specdec-eval lm-eval run --model specdec --model_args model=smollm2,spec=eagle3 ...`
(lm-eval has no plugin discovery, so its own `lm_eval` executable only sees models it imports itself; our
`lm-eval` subcommand imports this module first, then hands over to lm-eval's command line).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from ..workers.config import EngineConfig, KVCacheConfig, SamplingParams, SpecConfig, parse_bytes
from ..workers.engine import Engine, GenerationOutput
from ..workers.errors import UserError
from . import gsm8k

DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's own backends default to this when a task names no max_gen_toks
# lm-eval spells the same limit four ways (lm_eval.models.utils.normalize_gen_kwargs); first one present wins.
_MAX_TOKEN_KEYS = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")


def sampling_from_gen_kwargs(gen_kwargs: dict[str, Any], default_max: int) -> SamplingParams:
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


@register_model("specdec")
class SpecDecLM(LM):
    def __init__(
        self,
        engine: Engine | None = None,
        max_gen_toks: int | dict[str, int] = DEFAULT_MAX_GEN_TOKS,
        progress: Callable | None = None,
        cache: Any = None,  # evals.resume.GenerationCache: finished generations of this run, for resume
        **engine_args: Any,
    ) -> None:
        super().__init__()
        self.engine = engine if engine is not None else Engine(engine_config_from_args(engine_args))
        # one limit for every task, or per lm-eval task name (a task's own gen_kwargs still win)
        self.max_gen_toks = dict(max_gen_toks) if isinstance(max_gen_toks, dict) else int(max_gen_toks)
        self.progress = progress
        self.cache = cache
        # (lm-eval task name, doc id) -> the engine's output, for per-sample records (tokens, acceptance)
        self.outputs: dict[tuple[str, int], GenerationOutput] = {}

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
        return cls(**args)

    # --- generation ------------------------------------------------------------------------------------

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        if not requests:
            return []
        prompts = [req.args[0] for req in requests]
        sampling = [sampling_from_gen_kwargs(req.args[1], self._max_for(req.metadata[0])) for req in requests]
        self.running = RunningScore([getattr(req, "doc", None) for req in requests])
        outputs = self._generate(prompts, sampling)
        for req, out in zip(requests, outputs, strict=True):
            task, doc_id = req.metadata[0], req.metadata[1]
            self.outputs[(task, int(doc_id))] = out
        # A failed request is never scored as a wrong answer: the caller checks outputs for "error" and fails
        # the run; lm-eval gets an empty string so it can finish its bookkeeping.
        return [out.text if out.finish_reason != "error" else "" for out in outputs]

    def _generate(self, prompts: list, sampling: list[SamplingParams]) -> list[GenerationOutput]:
        """Reuse outputs this run already finished (resume); generate the rest, persisting each as it finishes."""
        cached = [self.cache.get(p, s) if self.cache else None for p, s in zip(prompts, sampling, strict=True)]
        todo = [i for i, c in enumerate(cached) if c is None]
        self.num_reused = len(prompts) - len(todo)
        running = getattr(self, "running", None) or RunningScore([])
        for i, c in enumerate(cached):
            if c is not None:
                running.add(i, c.text)
        progress = running.wrap(self.progress)
        fresh: list[GenerationOutput] = []
        if todo:
            todo_prompts, todo_sampling = [prompts[i] for i in todo], [sampling[i] for i in todo]

            def seen(out: GenerationOutput) -> None:  # each output as soon as it finishes
                running.add(todo[out.index], out.text)
                if self.cache is not None and not hasattr(self.engine, "world"):
                    self.cache.put(todo_prompts[out.index], todo_sampling[out.index], out)

            if hasattr(self.engine, "world"):  # torchrun job: each replica leader persists its own share
                folder = str(self.cache.folder) if self.cache and self.cache.folder else None
                fresh = self.engine.generate(todo_prompts, todo_sampling, progress, cache_dir=folder, on_output=seen)
            else:
                fresh = self.engine.generate(todo_prompts, todo_sampling, progress=progress, on_output=seen)
        for i, out in zip(todo, fresh, strict=True):
            cached[i] = out
        return cached  # type: ignore[return-value]

    def _max_for(self, task: str) -> int:
        if isinstance(self.max_gen_toks, dict):
            return self.max_gen_toks.get(task, DEFAULT_MAX_GEN_TOKS)
        return self.max_gen_toks

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
        return str(
            tokenizer.apply_chat_template(chat_history, add_generation_prompt=add_generation_prompt, tokenize=False)
        )

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.engine.tokenizer, "name_or_path", "") or self.engine.config.model).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.engine.tokenizer, "chat_template", None) if chat_template else None

    def get_model_info(self) -> dict[str, Any]:
        c = self.engine.config
        return {"model": c.model, "kv_cache": c.kv_cache.version, "spec": c.spec.algorithm if c.spec else None}


class RunningScore:
    """A live score for the progress line while generation runs: GSM8K flexible-extract, or the last (X) letter
    for GPQA, on the outputs finished so far. Only a progress hint: the reported score is lm-eval's."""

    _LETTER = re.compile(r"\(([A-D])\)")

    def __init__(self, docs: list) -> None:
        self.docs = docs
        self.correct: dict[int, bool] = {}

    def add(self, i: int, text: str) -> None:
        doc = self.docs[i] if i < len(self.docs) else None
        answer = str(doc.get("answer", "")) if isinstance(doc, dict) else ""
        if "####" in answer:
            self.correct[i] = gsm8k.is_correct(gsm8k.extract(text, "flexible-extract"), answer)
        elif re.fullmatch(r"\([A-D]\)", answer):
            letters = self._LETTER.findall(text)
            self.correct[i] = bool(letters) and f"({letters[-1]})" == answer

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


def engine_config_from_args(args: dict[str, Any]) -> EngineConfig:
    """EngineConfig from lm-eval --model_args strings: model, kv_cache, dtype, device, spec, draft_len,
    draft_model, max_batch_size, max_seq_len, seed."""
    known = {"model", "kv_cache", "dtype", "device", "spec", "draft_len", "draft_model", "max_batch_size",
             "max_seq_len", "seed", "device_memory"}  # fmt: skip
    unknown = set(args) - known
    if unknown:
        raise UserError(f"unknown specdec model_args: {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    spec = None
    if args.get("spec") not in (None, "", "none"):
        spec = SpecConfig(
            algorithm=str(args["spec"]),
            max_draft_len=int(args.get("draft_len", SpecConfig().max_draft_len)),
            draft_model=str(args.get("draft_model", SpecConfig().draft_model)),
        )
    defaults = EngineConfig()
    return EngineConfig(
        model=str(args.get("model", defaults.model)),
        kv_cache=KVCacheConfig(version=str(args.get("kv_cache", KVCacheConfig().version))),
        dtype=str(args.get("dtype", defaults.dtype)),
        device=str(args.get("device", defaults.device)),
        max_batch_size=int(args.get("max_batch_size", defaults.max_batch_size)),
        max_seq_len=int(args["max_seq_len"]) if args.get("max_seq_len") else defaults.max_seq_len,
        seed=int(args.get("seed", defaults.seed)),
        spec=spec,
        device_memory=parse_bytes(str(args["device_memory"])) if args.get("device_memory") else None,
    )
