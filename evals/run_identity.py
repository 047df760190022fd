"""Who a run is: everything that shapes its samples (the run key that resume and baseline lookups match on), its
TensorRT-LLM-style test id (what waives.txt names) and reference model key, and the non-speculative configuration a
spec-dec run is checked against (its baseline, its paired twins). Shared by the pipeline and the lossless gate."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..results import manifest as mf
from ..results import store
from ..workers.config import EngineConfig
from ..workers.faults import behaviour_faults
from ..workers.interface import EngineIdentity, InferenceEngine
from ..workers.registry import spec_method
from .run_types import EvalOptions


def model_key_for(engine: InferenceEngine, explicit: str | None) -> str:
    """The references' model key: --model-key, else a known name for the presets, else the checkpoint's
    Hugging Face name (config.json _name_or_path) or folder name."""
    if explicit:
        return explicit
    model = engine.identity.model
    if model == "smollm2":
        return "HuggingFaceTB/SmolLM2-135M-Instruct"
    name = getattr(engine.tokenizer, "name_or_path", "") or ""
    return name if name and "/" in name and not os.path.isabs(name) else Path(model).name


def run_config(identity: EngineIdentity, options: EvalOptions) -> dict[str, Any]:
    """Everything that affects the samples: the engine configuration and the evaluation options."""
    eval_opts = {
        "tasks": [t.name for t in options.tasks],
        "data_dir": options.data_dir,
        "limit": options.limit,
        "num_fewshot": options.num_fewshot,
        "max_output_len": options.max_output_len,
        "apply_chat_template": options.apply_chat_template,
        "seed": options.seed,
    }
    # Which documents and in which order (only when not the default, so that earlier runs keep their keys).
    if options.stop_file:  # a side of a sequential A/B: evaluated in the seeded order, stopped from outside
        eval_opts.update(ab_sequential=True, early_stop_batch=options.early_stop_batch)
    # The generation conditions the options change (only when given, so that earlier runs keep their keys): a
    # sampled run never resumes from, nor pairs with, a greedy one (evals/conditions/).
    if options.gen_kwargs:
        eval_opts["gen_kwargs"] = options.generation_kwargs.as_dict()
    if options.chat_template_kwargs:
        eval_opts["chat_template_kwargs"] = options.template_kwargs.as_dict()
    if options.repeats > 1:
        eval_opts["repeats"] = options.repeats
    if options.sample != "first" or options.early_stop:
        eval_opts.update(
            sample=options.sample, early_stop=options.early_stop, early_stop_batch=options.early_stop_batch
        )
    return {"engine": identity.config, "eval": eval_opts}


@functools.lru_cache(maxsize=1)
def git_state() -> dict[str, Any]:
    """Read once per process: a commit made while a run is going must not change which baseline it pairs with."""
    return mf.git_state()


def run_key(identity: EngineIdentity, options: EvalOptions) -> str:
    """Same key, same samples: the configuration, the commit and, for a modified tree, the hash of what is
    uncommitted (a dirty tree never resumes or pairs with a clean run of the same commit)."""
    git = git_state()
    code = (
        {"commit": git["commit"]}
        if not git.get("diff_sha256")
        else {"commit": git["commit"], "diff": git["diff_sha256"]}
    )
    return store.config_key({**run_config(identity, options), **code})


def test_id(engine: InferenceEngine, options: EvalOptions) -> str:
    """A pytest node id in TensorRT-LLM's accuracy-test style, so runs line up with waives.txt entries, e.g.
    accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]. The spec method's registry
    entry names its test and parameters (ngram: test_ngram[v1_kv_cache-tp1]); plain decoding is test_auto_dtype."""
    i = engine.identity
    name = model_key_for(engine, options.model_key).split("/")[-1]
    cls = "Test" + re.sub(r"[^0-9A-Za-z]+", "_", name.replace("-Instruct", "")).strip("_")
    method = spec_method(i.spec) if i.spec else None
    test = method.test_function if method else "test_auto_dtype"
    params = [f"{i.kv_cache}_kv_cache"] if i.kv_cache else []
    params += list(method.test_params) if method else []
    return f"accuracy/test_specdec.py::{cls}::{test}[{'-'.join(params + [f'tp{i.tp_size}'])}]"


def baseline_config(config: EngineConfig) -> EngineConfig:
    """The non-speculative baseline of a spec-dec configuration: same model, KV cache, dtype, batch and seed; no
    draft. Environmental faults are dropped (the baseline is the clean reference the spec-dec outputs must equal);
    behaviour faults stay: a planted code bug is in every engine of the build, so the baseline carries it too (each
    fires only on its own code path) and its run key names it, so a mutated baseline is never a clean run's."""
    return replace(config, spec=None, inject=behaviour_faults(config.inject))


def baseline_identity(identity: EngineIdentity) -> EngineIdentity:
    config = {**identity.config, "spec": None, "inject": behaviour_faults(identity.config.get("inject") or ())}
    return replace(identity, spec=None, max_draft_len=0, config=config)


def twin_identity(identity: EngineIdentity) -> EngineIdentity:
    """The plain twins of a paired spec-dec run: the baseline's configuration plus the spec-dec configuration they
    were decoded beside. Their own run key therefore never equals a plain run's: a twin shares the spec engine's
    prefill and target forward, so no later run may take it for an independent baseline."""
    base = baseline_identity(identity)
    return replace(base, config={**base.config, "paired_twin_of": {"spec": identity.config.get("spec")}})


def is_paired_twin(run: store.Run) -> bool:
    """A non-speculative run decoded beside a spec-dec run (paired decoding), from any version of the store: newer
    twins say so in their configuration, older ones only by being paired with a run while not speculative."""
    manifest = run.manifest()
    engine = (manifest.get("config") or {}).get("engine") or {}
    return "paired_twin_of" in engine or (manifest.get("paired_with") is not None and not engine.get("spec"))


def find_baseline(out: str, identity: EngineIdentity, options: EvalOptions) -> store.Run | None:
    """The newest finished run of exactly this (non-speculative) configuration at this commit that evaluated every
    document it planned (an early-stopped run covers only a prefix), if any. Never a paired twin: older stores
    recorded twins under the key a plain run has (a twin that carried the spec engine's bug then passed for a
    plain run, and a later `--baseline separate` run compared against it and said PASS)."""
    key = run_key(identity, options)
    for run in reversed(store.list_runs(out)):
        if run.key == key and run.is_finished and not run.run_summary().early_stopped and not is_paired_twin(run):
            return run
    return None
