"""The Eagle3 head that ships for the embedded model: what it is, that it is the default, that it was made by
the documented command's defaults, and that it drafts well while the output stays exactly plain decoding."""

from __future__ import annotations

import gc
import json
from dataclasses import asdict
from pathlib import Path

import pytest
from specdec_eval.workers.config import SamplingParams, SpecConfig
from specdec_eval.workers.draft_training.prompts import STOP, fewshot_prompts
from specdec_eval.workers.draft_training.trainer import DraftTrainConfig
from specdec_eval.workers.spec.eagle3_head import SHIPPED_HEADS, read_head_folder, resolve_draft_model

from specdec_eval.errors import UserError

from ...conftest import make_engine

HEAD = SHIPPED_HEADS["smollm2"]
DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


def test_the_shipped_head_is_small_float16_and_made_by_the_documented_defaults():
    assert (HEAD / "model.safetensors").stat().st_size <= 20 * 10**6
    cfg, tensors = read_head_folder(HEAD)
    assert cfg["draft_vocab_size"] == 4096 and cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert tensors["lm_head.weight"].shape == (4096, 576) and str(tensors["fc.weight"].dtype) == "torch.float16"
    training = json.loads((HEAD / "training.json").read_text())
    assert training["config"] == asdict(DraftTrainConfig())  # `specdec-eval draft train` with no options
    assert training["total_s"] <= 3600


def test_auto_means_the_shipped_head_for_smollm2_and_random_for_tiny():
    assert resolve_draft_model("auto", "smollm2") == str(HEAD)
    assert resolve_draft_model("auto", "tiny") == "random"
    assert resolve_draft_model("/some/head", "smollm2") == "/some/head"
    with pytest.raises(UserError, match="no Eagle3 head ships"):
        resolve_draft_model("auto", "/models/llama")


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "gsm8k" / "test.jsonl").is_file(), reason="needs ../shared/data")
def test_the_default_head_drafts_gsm8k_well_and_changes_no_output(smollm2):
    from specdec_eval.evals.tasks.gsm8k import load_gsm8k_split

    test = load_gsm8k_split(str(DATA), "test")[:8]
    prompts = fewshot_prompts(test, 8, 5, seed=1234, shots_from=load_gsm8k_split(str(DATA), "train"))
    params = SamplingParams(max_new_tokens=64, stop=STOP)
    # ~1.2k tokens a request: the tests' default 1 GiB holds 4 at once (two waves of 64 steps); 2 GiB admits all 8
    plain = make_engine(smollm2, kv_enable_block_reuse=False, device_memory=2 * 2**30).generate(prompts, params)
    gc.collect()
    spec_engine = make_engine(
        smollm2, max_batch_size=8, spec=SpecConfig(max_draft_len=3), device_memory=2 * 2**30
    )  # draft model: auto
    spec = spec_engine.generate(prompts, params)
    assert [o.token_ids for o in spec] == [o.token_ids for o in plain]
    # a random head gives 1.0; the full measurement (200 questions) is in the README
    assert spec_engine.last_stats.acceptance["acceptance_length"] >= 1.6, spec_engine.last_stats.acceptance
