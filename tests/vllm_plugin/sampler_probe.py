"""Run in the vLLM venv (no server): vLLM's real RejectionSampler on one hand-made greedy step, with the plugin loaded
as a vLLM worker loads it, once per class named on the command line ("" for none). Prints one JSON object:
class -> the step's emitted tokens, for a step where the target rejected the last draft and one where it accepted all.
The rows: drafts [5, 6, 7]; the target's argmax per verify row 5, 6, 9 (or 5, 6, 7), then 8 for the bonus."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch


def main(names: list[str]) -> None:
    live = tempfile.NamedTemporaryFile("w", suffix=".class", delete=False)
    live.close()
    os.environ["SPECDEC_EVAL_VLLM_MUTANT"] = f"@{live.name}"
    from vllm.platforms import current_platform
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    current_platform.register_triton_kernel_overrides()  # what a worker does next, and when the plugin plants
    from vllm.v1.sample import rejection_sampler as rs
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    def i32(values):
        return torch.tensor(values, dtype=torch.int32)

    metadata = SpecDecodeMetadata(
        draft_token_ids=i32([5, 6, 7]),
        num_draft_tokens=[3],
        cu_num_draft_tokens=i32([3]),
        cu_num_sampled_tokens=i32([4]),
        target_logits_indices=i32([0, 1, 2]),
        bonus_logits_indices=i32([3]),
        logits_indices=i32([0, 1, 2, 3]),
    )
    greedy = SamplingMetadata(
        temperature=None,
        all_greedy=True,
        all_random=False,
        top_p=None,
        top_k=None,
        generators={},
        max_num_logprobs=None,
        logprob_token_ids=None,
        no_penalties=True,
        prompt_token_ids=None,
        frequency_penalties=torch.zeros(1),
        presence_penalties=torch.zeros(1),
        repetition_penalties=torch.ones(1),
        output_token_ids=[[]],
        spec_token_ids=[[]],
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
    )
    sampler = rs.RejectionSampler(Sampler())
    found = {}
    for name in names:
        with open(live.name, "w") as f:
            f.write(name)
        found[name] = {
            case: sampler(metadata, None, _logits(argmax), greedy).sampled_token_ids[0].tolist()
            for case, argmax in (("rejected", [5, 6, 9, 8]), ("accepted", [5, 6, 7, 8]))
        }
    os.unlink(live.name)
    print(json.dumps({"planted": bool(getattr(rs, "_specdec_planted", False)), "steps": found}))


def _logits(argmax: list[int]) -> torch.Tensor:
    logits = torch.zeros(len(argmax), 16)
    logits[torch.arange(len(argmax)), torch.tensor(argmax)] = 5.0
    return logits


if __name__ == "__main__":
    main(sys.argv[1:])
