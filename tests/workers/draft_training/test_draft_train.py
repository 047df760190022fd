"""`specdec-eval draft train`: the collected data, the training-time-test objective against the real draft loop,
and checkpoints that make an interrupted run end with the same weights as an uninterrupted one."""

from __future__ import annotations

import pytest
import torch
from specdec_eval.cli.main import main
from specdec_eval.workers.draft_training import trainer
from specdec_eval.workers.draft_training.collect import FeatureRecorder, collect_shards
from specdec_eval.workers.draft_training.prompts import fewshot_prompts
from specdec_eval.workers.draft_training.ttt import ttt_logits
from specdec_eval.workers.draft_training.vocab import d2t_offsets, draft_vocab, target_to_draft
from specdec_eval.workers.loading.presets import tiny_config
from specdec_eval.workers.model.attn_metadata import AttentionMetadata, BatchEntry
from specdec_eval.workers.model.layers.paged_kv import PagedKV
from specdec_eval.workers.spec.eagle3_head import build_draft_model

from ...conftest import make_engine

DOCS = [
    {"question": f"Tom has {a} apples and buys {b} more. How many now?", "answer": f"{a}+{b}={a + b}\n#### {a + b}"}
    for a, b in [(3, 4), (10, 2), (7, 7), (12, 30), (5, 1), (8, 9)]
]


def test_fewshot_prompts_are_seeded_and_never_show_their_own_question():
    a = fewshot_prompts(DOCS, 6, 2, seed=1)
    assert a == fewshot_prompts(DOCS, 6, 2, seed=1) and a != fewshot_prompts(DOCS, 6, 2, seed=2)
    for i, p in enumerate(a):
        assert p.count("Question:") == 3 and p.endswith(f"Question: {DOCS[i]['question']}\nAnswer:")
        assert p.count(DOCS[i]["question"]) == 1


def test_collected_features_equal_one_forward_over_the_whole_sequence(tiny, tmp_path):
    engine = make_engine(tiny, kv_enable_block_reuse=False, max_batch_size=2)  # 3 prompts: one waits, later steps mix
    layers = (2, 3, 4)
    prompts = fewshot_prompts(DOCS, 3, 1, seed=0)
    (path,) = collect_shards(engine, prompts, tmp_path, layers, shard_size=3, max_new_tokens=12)
    sequences = torch.load(path, weights_only=True)["sequences"]
    assert len(sequences) == 3
    for s in sequences:
        ids, n = s["tokens"].tolist(), len(s["features"])
        assert n == len(ids) - 1 and s["features"].shape[1] == 3 * 64
        # greedy answers: the target's own prediction is the next token of its answer
        p = s["prompt_len"]
        assert s["labels"][p - 1 :].tolist() == ids[p:]
        # the recording (prefill chunk + one row per decode step) equals a single forward over the sequence
        meta = AttentionMetadata(16, torch.device("cpu")).prepare([BatchEntry(0, 0, n, list(range(n // 16 + 1)), True)])
        pool = torch.zeros(engine.kv.pool.shape[0], 2, (n // 16 + 1) * 16, 2, 16)
        with torch.inference_mode():
            hidden, captured = engine.model(torch.tensor(ids[:-1]), meta, PagedKV(pool), layers)
            labels = engine.model.compute_logits(hidden).argmax(-1)
        torch.testing.assert_close(s["features"].float(), torch.cat(captured, -1), atol=2e-2, rtol=1e-2)
        assert s["labels"].tolist() == labels.tolist()


def test_collect_refuses_block_reuse(tiny, tmp_path):
    with pytest.raises(ValueError, match="block reuse"):
        collect_shards(make_engine(tiny), ["a"], tmp_path, (2, 3, 4), 1, 4)


def test_recorder_keeps_the_last_recording_of_a_position():
    rec = FeatureRecorder((0,))
    rec.chunks[7] = {
        0: (torch.zeros(3, 2, dtype=torch.float16), torch.tensor([1, 2, 3], dtype=torch.int32)),
        2: (torch.ones(2, 2, dtype=torch.float16), torch.tensor([9, 4], dtype=torch.int32)),
    }
    features, labels = rec.take(7, 4)
    assert labels.tolist() == [1, 2, 9, 4] and features[2:].eq(1).all()


def test_draft_vocab_is_the_most_frequent_labels_in_id_order():
    labels = [torch.tensor([5, 5, 5, 2, 2, 9, 1])]
    used = draft_vocab(labels, 12, 3)
    assert used.tolist() == [1, 2, 5]  # 5 (x3), 2 (x2), then the lowest id among ties
    assert (used == torch.arange(3) + d2t_offsets(used)).all()  # target = draft + d2t[draft]
    assert target_to_draft(used, 12)[[1, 2, 5, 9]].tolist() == [0, 1, 2, -100]


@torch.no_grad()
def test_ttt_logits_equal_the_draft_loop_over_a_paged_cache(tiny):
    """Step j for anchor a must compute exactly what drafting step j computes after the target accepted
    position a: pass 0 over positions 0..a, then single-token steps on the head's own output."""
    torch.manual_seed(0)
    cfg = tiny_config()
    head = build_draft_model(cfg, "random", (2, 3, 4), seed=3).double()
    embed = torch.randn(cfg.vocab_size, cfg.hidden_size, dtype=torch.float64)
    n, steps = 20, 3
    tokens = torch.randint(0, cfg.vocab_size, (n + 1,))
    features = torch.randn(n, 3 * cfg.hidden_size, dtype=torch.float64)
    anchors = torch.tensor([0, 4, 11, 15, 18])
    per_step = ttt_logits(head, embed, tokens, features, anchors, steps)
    assert [len(rows) for rows, _ in per_step] == [5, 4, 4]  # later steps need a token and a label to exist

    for j, (rows, logits) in enumerate(per_step):
        for r, a in enumerate(rows.tolist()):
            pool = PagedKV(torch.zeros(1, 2, 64, cfg.num_key_value_heads, cfg.head_dim, dtype=torch.float64)).layer(0)
            meta = AttentionMetadata(16, torch.device("cpu")).prepare([BatchEntry(0, 0, a + 1, [0, 1, 2, 3], True)])
            out = head(embed[tokens[1 : a + 2]], head.fuse([features[: a + 1]]), meta, pool)[a : a + 1]
            for i in range(1, j + 1):
                meta.prepare([BatchEntry(0, a + i, 1, [0, 1, 2, 3], False)])
                out = head(embed[tokens[a + i + 1 : a + i + 2]], out, meta, pool)
            expected = head.lm_head(head.norm(out)).float()[0]
            torch.testing.assert_close(logits[r], expected, atol=1e-9, rtol=1e-9)


def _tiny_cfg(**kw) -> trainer.DraftTrainConfig:
    base = dict(
        model="tiny",
        num_prompts=4,
        num_shots=1,
        max_new_tokens=8,
        collect_batch=4,
        draft_vocab_size=64,
        epochs=2,
        seqs_per_step=1,
        warmup_steps=2,
        checkpoint_every=1,
        seed=5,
    )
    return trainer.DraftTrainConfig(**{**base, **kw})


def test_training_learns_and_an_interrupted_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    logs: list[str] = []
    summary = trainer.train_draft(_tiny_cfg(), DOCS, tmp_path / "a", tmp_path / "a" / "head", logs.append)
    full = load_file(tmp_path / "a" / "head" / "model.safetensors")
    assert full["lm_head.weight"].dtype == torch.float16 and full["d2t"].dtype == torch.int64
    assert summary["data"]["sequences"] == 4 and summary["history"]
    assert any("collect: 4/4 prompts" in line for line in logs)

    # Interrupt the second run after its third checkpoint, then run again with the same work folder.
    real_save, saves = trainer._save_checkpoint, []

    def save_then_die(*args):
        real_save(*args)
        saves.append(args[-1])
        if len(saves) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        trainer.train_draft(_tiny_cfg(), DOCS, tmp_path / "b", tmp_path / "b" / "head", logs.append)
    monkeypatch.setattr(trainer, "_save_checkpoint", real_save)
    trainer.train_draft(_tiny_cfg(), DOCS, tmp_path / "b", tmp_path / "b" / "head", logs.append)
    assert any("resumed from" in line and "at step 3" in line for line in logs)
    resumed = load_file(tmp_path / "b" / "head" / "model.safetensors")
    assert all(torch.equal(full[k], resumed[k]) for k in full)


def test_data_is_shared_by_training_settings_but_checkpoints_are_not():
    a, b = _tiny_cfg(), _tiny_cfg(epochs=3, lr=1e-4)
    assert trainer._digest(a.data_key()) == trainer._digest(b.data_key())
    assert trainer._digest(trainer.asdict(a)) != trainer._digest(trainer.asdict(b))
    assert trainer._digest(a.data_key()) != trainer._digest(_tiny_cfg(num_shots=2).data_key())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-prompts", "0"], "'--num-prompts': Input should be greater than or equal to 1"),
        (["--num-shots", "-1"], "--num-shots"),
    ],
)
def test_bad_cli_input_is_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["draft", "train", "--model", "tiny", *args])
    assert e.value.code == 2 and message in capsys.readouterr().err
