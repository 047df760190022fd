"""Measure a task's score with several samples per document at temperature > 0, and its error clustered by document,
outside the run pipeline (which takes --repeats once it is wired): the pieces `run --repeats` will use, end to end.

Prompts are the task's own, built by lm-eval (its few-shot context, our chat template with the template kwargs);
sample r of document d is decoded by our engine with seed sample_seed(seed, task, d, r); every response is scored on
its own by the task's lm-eval filters and metric (evals/tasks/scoring.py). Printed: the score (mean of per-document
means), its clustered standard error, the error as if the samples were independent, and the spread of the score in a
two-stage bootstrap of the run (documents, then each document's samples) beside the stated error. With --out, the
per-document correctness (doc ids and 0/1 only: no text) is written for `python -m specdec_eval.studies.clustered_scores
--from-groups`.

  python scripts/measure_repeats.py --task gpqa_diamond_aa --docs 20 --repeats 4 --gen-kwargs temperature=1.0 \\
      --apply-chat-template --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

from specdec_eval.evals.conditions.gen_kwargs import GenKwargs
from specdec_eval.evals.conditions.repeats import sample_seed
from specdec_eval.evals.tasks.registry import parse_tasks, source_for, task_conditions, write_task_yamls
from specdec_eval.evals.tasks.scoring import score_each
from specdec_eval.stats.clustered import clustered_score
from specdec_eval.studies.clustered_scores import bootstrap
from specdec_eval.workers.config import EngineConfig, KVCacheConfig, SamplingParams, parse_bytes
from specdec_eval.workers.engine.engine import Engine
from specdec_eval.workers.loading.chat_template import ChatTemplateKwargs, render_chat, unread_kwargs

from specdec_eval.errors import UserError


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--task", required=True)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--docs", type=int, default=20, help="a seeded random subset of this many documents")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--gen-kwargs", default="temperature=1.0")
    p.add_argument("--apply-chat-template", action="store_true")
    p.add_argument("--chat-template-kwargs", default=None)
    p.add_argument("--max-output-len", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device-memory", default="2GiB")
    p.add_argument("--endpoint", default=None, help="an OpenAI-compatible server instead of our engine in-process")
    p.add_argument("--chat", action="store_true", help="with --endpoint: /v1/chat/completions (the server renders)")
    p.add_argument("--out", type=Path, default=None, help="write {doc: [0/1 per sample]} of the first filter here")
    args = p.parse_args()
    try:
        return measure(args)
    except UserError as e:
        print(f"measure_repeats: error: {e}", file=sys.stderr)
        return 2


def measure(args: argparse.Namespace) -> int:
    from lm_eval.tasks import TaskManager

    (spec,) = parse_tasks(args.task)
    kwargs = GenKwargs.parse(args.gen_kwargs)
    template_kwargs = ChatTemplateKwargs.parse(args.chat_template_kwargs) if args.chat_template_kwargs else None
    conditions = task_conditions(
        spec,
        gen_kwargs=kwargs,
        apply_chat_template=args.apply_chat_template,
        chat_template_kwargs=template_kwargs or ChatTemplateKwargs(),
        max_output_len=args.max_output_len,
        repeats=args.repeats,
    )
    print(f"{spec.name}: {conditions.describe()}", flush=True)
    source = source_for(spec, args.data_dir)
    folder = write_task_yamls(
        [spec], {spec.name: source}, Path("/tmp") / f"measure-repeats-{spec.name}", args.seed, gen_kwargs=kwargs
    )
    task = TaskManager(include_path=str(folder), include_defaults=False).load([spec.lm_eval_name])["tasks"]
    task = task[spec.lm_eval_name]
    docs = list(task.test_docs() if task.has_test_docs() else task.validation_docs())
    chosen = sorted(random.Random(args.seed).sample(range(len(docs)), min(args.docs, len(docs))))
    if args.endpoint:
        from specdec_eval.peers.client.config import EndpointConfig
        from specdec_eval.peers.client.engine import EndpointEngine

        engine = EndpointEngine(
            EndpointConfig(
                url=args.endpoint,
                chat=args.chat,
                model=args.model,
                concurrency=4,
                chat_template_kwargs=template_kwargs or ChatTemplateKwargs(),
            )
        )
    else:
        engine = Engine.build(
            EngineConfig(
                model=args.model,
                device_memory=parse_bytes(args.device_memory),
                kv_cache=KVCacheConfig(enable_block_reuse=True),
            )
        )
    tokenizer = engine.tokenizer
    server_renders = bool(args.endpoint and args.chat)
    unread = unread_kwargs(tokenizer, template_kwargs)
    if unread:
        print(f"note: this model's chat template does not read {', '.join(unread)}: it changes nothing", flush=True)

    def chat(history, add_generation_prompt: bool = True):
        if server_renders:  # the messages themselves: the server renders them with the template kwargs
            return [dict(m) for m in history]
        return render_chat(tokenizer, history, add_generation_prompt, template_kwargs)

    gk = dict(conditions.generation_kwargs)
    prompts, sampling, owners = [], [], []
    for doc_id in chosen:
        ctx = task.fewshot_context(
            docs[doc_id],
            conditions.num_fewshot,
            apply_chat_template=args.apply_chat_template,
            fewshot_as_multiturn=args.apply_chat_template,
            chat_template=chat if args.apply_chat_template else None,
        )
        for r in range(args.repeats):
            prompts.append(ctx)
            sampling.append(
                SamplingParams(
                    max_new_tokens=conditions.max_output_len,
                    temperature=conditions.temperature,
                    top_p=conditions.top_p,
                    top_k=conditions.top_k,
                    stop=tuple(s for s in gk.get("until", []) if s),
                    seed=sample_seed(kwargs.get("seed", args.seed), spec.name, doc_id, r),
                )
            )
            owners.append(doc_id)
    start = time.time()

    def progress(done: int, total: int, stats) -> None:
        if done >= progress.next or done == total:
            progress.next = done + 10
            print(f"  {done}/{total} samples, {time.time() - start:.0f} s", flush=True)

    progress.next = 0
    outputs = engine.generate(prompts, sampling, progress)
    elapsed = time.time() - start
    by_doc: dict[int, list[str]] = {}
    for doc_id, out in zip(owners, outputs, strict=True):
        by_doc.setdefault(doc_id, []).append(out.text)
    filters = [f.name for f in task._filters]
    groups: dict[str, dict[int, list[float]]] = {f: {} for f in filters}
    for doc_id, texts in by_doc.items():
        for per_filter in score_each(task, docs[doc_id], texts):
            for name, (_, correct) in per_filter.items():
                groups[name].setdefault(doc_id, []).append(100.0 if correct else 0.0)
    tokens = sum(len(o.token_ids) for o in outputs)
    print(f"{len(outputs)} samples ({len(chosen)} documents x {args.repeats}), {tokens} tokens in {elapsed:.0f} s")
    prompt_tokens = [len(o.prompt_token_ids) for o in outputs]
    digest = hashlib.sha256(json.dumps([o.token_ids for o in outputs]).encode()).hexdigest()[:16]
    print(
        f"prompt tokens per sample {min(prompt_tokens)}-{max(prompt_tokens)}; sha256 of all output token ids {digest}"
    )
    for name in filters:
        score = clustered_score(groups[name])
        boot = bootstrap({str(k): v for k, v in groups[name].items()}, resamples=20_000, seed=args.seed)
        print(f"{name}: {score.describe()}")
        print(
            f"  cluster bootstrap of this run (documents resampled, 20000 times): standard deviation of the score "
            f"{boot['bootstrap_sd']:.2f}, beside the stated {score.se or 0:.2f}"
        )
    if args.out is not None:
        first = groups[filters[0]]
        args.out.write_text(json.dumps({str(k): [int(v > 0) for v in vs] for k, vs in first.items()}))
        print(f"per-document correctness ({filters[0]}) written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
