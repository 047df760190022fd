"""`specdec-eval draft train`: collect, choose the draft vocabulary, initialise from the target, train with the
training-time-test objective, export a head in the published layout.

Everything is seeded (prompt shots, anchor subsets, init, data order), and a checkpoint after every
`checkpoint_every` optimizer steps holds the model, the optimizer and the step, so a killed run continues where
it stopped and ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..config import EngineConfig, KVCacheConfig
from ..spec.eagle3_head import Eagle3DraftModel, Eagle3HeadConfig, default_capture_layers, save_head_folder
from .collect import collect_shards
from .prompts import fewshot_prompts
from .ttt import ttt_loss
from .vocab import coverage, d2t_offsets, draft_vocab, target_to_draft


@dataclass(frozen=True)
class DraftTrainConfig:
    """Defaults are sized for a 2-core CPU in well under an hour (README: Draft head)."""

    model: str = "smollm2"
    num_prompts: int = 480  # GSM8K train questions the target answers
    num_shots: int = 2  # lm-eval format shots per prompt (evaluation uses 5)
    max_new_tokens: int = 256  # as the gsm8k task
    collect_batch: int = 32
    draft_vocab_size: int = 4096
    ttt_steps: int = 3  # drafting steps trained (= the K the head is measured at)
    epochs: int = 5
    seqs_per_step: int = 4  # sequences accumulated per optimizer step
    lr: float = 2e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 0.5
    prompt_anchor_fraction: float = 0.25  # share of prompt positions with a loss (all answer positions have one)
    seed: int = 0
    checkpoint_every: int = 25

    def data_key(self) -> dict:
        """What the collected data depends on (a different key means a fresh collection)."""
        return {k: getattr(self, k) for k in ("model", "num_prompts", "num_shots", "max_new_tokens", "seed")}


Log = Callable[[str], None]


def train_draft(cfg: DraftTrainConfig, docs: list[dict], work_dir: Path, out_dir: Path, log: Log) -> dict:
    """Run the whole pipeline; returns the summary also written to out_dir/training.json."""
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    work_dir.mkdir(parents=True, exist_ok=True)
    # Collected data depends on fewer settings than the weights do: a run with other training settings reuses
    # it, while a checkpoint is only ever resumed by the exact same configuration.
    data_dir = work_dir / f"data-{_digest(cfg.data_key())}"
    checkpoint = work_dir / f"checkpoint-{_digest(asdict(cfg))}.pt"
    data = _collect(cfg, docs, data_dir, log)
    history, train_s = _train(cfg, data, checkpoint, log)
    data.draft.d2t.copy_(d2t_offsets(data.used))
    save_head_folder(data.draft, out_dir, dtype=torch.float16)
    summary = {
        "config": asdict(cfg),
        "capture_layers": list(data.layers),
        "data": {"sequences": len(data.sequences), "tokens": data.num_tokens, "answer_tokens": data.answer_tokens},
        "draft_vocab_coverage": round(data.cover, 4),
        "collect_s": round(data.collect_s, 1),
        "train_s": round(train_s, 1),
        "total_s": round(time.perf_counter() - t_start, 1),
        "history": history,
    }
    (out_dir / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    log(f"wrote {out_dir} ({_folder_mb(out_dir):.1f} MB) in {summary['total_s']:.0f} s")
    return summary


@dataclass
class _Collected:
    """The target's answers with their features and labels, and a head initialised from the target."""

    sequences: list[dict]
    layers: tuple[int, ...]
    used: torch.Tensor  # the draft vocabulary (target ids)
    cover: float
    t2d: torch.Tensor
    draft: Eagle3DraftModel
    embed: torch.Tensor
    collect_s: float

    @property
    def num_tokens(self) -> int:
        return sum(len(s["tokens"]) for s in self.sequences)

    @property
    def answer_tokens(self) -> int:
        return sum(len(s["tokens"]) - s["prompt_len"] for s in self.sequences)


def _collect(cfg: DraftTrainConfig, docs: list[dict], data_dir: Path, log: Log) -> _Collected:
    from ..engine.engine import Engine  # late: the engine pulls in transformers

    engine = Engine.build(
        EngineConfig(
            model=cfg.model,
            max_batch_size=cfg.collect_batch,
            seed=cfg.seed,
            kv_cache=KVCacheConfig(enable_block_reuse=False),
        )
    )
    target = engine.model_config
    layers = default_capture_layers(target.num_hidden_layers)
    prompts = fewshot_prompts(docs, cfg.num_prompts, cfg.num_shots, cfg.seed)
    log(
        f"collect: {len(prompts)} GSM8K train prompts ({cfg.num_shots}-shot), target answers greedily, "
        f"capture layers {list(layers)}"
    )
    t0 = time.perf_counter()

    def on_collect(done: int, total: int, tokens: int) -> None:
        log(f"collect: {done}/{total} prompts, {tokens} tokens, {time.perf_counter() - t0:.0f} s")

    shards = collect_shards(engine, prompts, data_dir, layers, cfg.collect_batch, cfg.max_new_tokens, on_collect)
    collect_s = time.perf_counter() - t0
    sequences = [s for p in shards for s in torch.load(p, weights_only=True)["sequences"]]
    used = draft_vocab((s["labels"] for s in sequences), target.vocab_size, cfg.draft_vocab_size)
    cover = coverage((s["labels"] for s in sequences), used, target.vocab_size)
    log(f"draft vocabulary: {len(used)} ids cover {cover:.1%} of the target's predictions")
    head_cfg = Eagle3HeadConfig(
        layer=Eagle3HeadConfig.for_target(target, layers).layer,
        target_hidden_size=target.hidden_size,
        draft_vocab_size=len(used),
        capture_layers=layers,
    )
    draft = Eagle3DraftModel(head_cfg)
    init_from_target(draft, engine.model, used, cfg.seed)
    embed = engine.model.model.embed_tokens.weight.detach()
    # The engine and its KV pool are freed when this returns, before training starts (only the embedding stays).
    return _Collected(sequences, layers, used, cover, target_to_draft(used, target.vocab_size), draft, embed, collect_s)


def _train(cfg: DraftTrainConfig, data: _Collected, checkpoint: Path, log: Log) -> tuple[list[dict], float]:
    """The training-time-test loop, resumable from `checkpoint`; returns the logged history and its seconds."""
    sequences, draft = data.sequences, data.draft
    steps_per_epoch = math.ceil(len(sequences) / cfg.seqs_per_step)
    total_steps = steps_per_epoch * cfg.epochs
    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg.warmup_steps, total_steps))
    step = _resume(checkpoint, draft, opt, sched, log)
    log(
        f"train: {len(sequences)} sequences ({data.num_tokens} tokens, {data.answer_tokens} answer tokens), "
        f"{cfg.epochs} epochs x {steps_per_epoch} steps, TTT steps {cfg.ttt_steps}"
    )
    t1 = time.perf_counter()
    history: list[dict] = []
    window = _Window(cfg.ttt_steps)
    while step < total_steps:
        epoch, i = divmod(step, steps_per_epoch)
        order = _epoch_order(len(sequences), cfg.seed, epoch)
        batch = order[i * cfg.seqs_per_step : (i + 1) * cfg.seqs_per_step]
        opt.zero_grad(set_to_none=True)
        for idx in batch:
            s = sequences[idx]
            anchors = _loss_anchors(s, cfg.prompt_anchor_fraction, cfg.seed, epoch, idx)
            loss, stats = ttt_loss(
                draft, data.embed, s["tokens"], s["features"], s["labels"], data.t2d, anchors, cfg.ttt_steps
            )
            (loss / len(batch)).backward()
            window.add(float(loss.detach()), stats)
        torch.nn.utils.clip_grad_norm_(draft.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        step += 1
        if step % cfg.checkpoint_every == 0 or step == total_steps:
            _save_checkpoint(checkpoint, draft, opt, sched, step)
        if step % 10 == 0 or step == total_steps:
            row = {"step": step, **window.summary()}
            history.append(row)
            log(
                f"train: step {step}/{total_steps} epoch {epoch + 1} loss {row['loss']:.3f} top-1 per step "
                f"{' '.join(f'{a:.2f}' for a in row['top1'])}, {time.perf_counter() - t1:.0f} s"
            )
            window = _Window(cfg.ttt_steps)
    return history, time.perf_counter() - t1


@torch.no_grad()
def init_from_target(draft: Eagle3DraftModel, target, used: torch.Tensor, seed: int) -> None:
    """Start near something useful: the output side (norm, lm_head rows of the draft vocabulary) and the decoder
    layer (for the hidden half of q/k/v) from the target's high capture layer, `fc` passing the high features
    through; everything else small and seeded. Training then only has to learn the one-token look-ahead."""
    g = torch.Generator().manual_seed(seed)
    for p in draft.parameters():
        p.copy_(torch.randn(p.shape, generator=g) * 0.02 if p.dim() > 1 else torch.ones(p.shape))
    h = draft.config.target_hidden_size
    src = target.model.layers[draft.config.capture_layers[-1]]
    mid = draft.midlayer
    draft.fc.weight[:, 2 * h : 3 * h] += torch.eye(h)
    for name in ("q_proj", "k_proj", "v_proj"):
        getattr(mid.self_attn, name).weight[:, h:] = getattr(src.self_attn, name).weight
    mid.self_attn.o_proj.weight.copy_(src.self_attn.o_proj.weight)
    mid.hidden_norm.weight.copy_(src.input_layernorm.weight)
    mid.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight)
    for name in ("gate_proj", "up_proj", "down_proj"):
        getattr(mid.mlp, name).weight.copy_(getattr(src.mlp, name).weight)
    draft.norm.weight.copy_(target.model.norm.weight)
    draft.lm_head.weight.copy_(target.lm_head.proj.weight[used])


class _Window:
    def __init__(self, steps: int) -> None:
        self.losses: list[float] = []
        self.correct = [0] * steps
        self.counted = [0] * steps

    def add(self, loss: float, stats: list[tuple[int, int]]) -> None:
        self.losses.append(loss)
        for j, (c, n) in enumerate(stats):
            self.correct[j] += c
            self.counted[j] += n

    def summary(self) -> dict:
        return {
            "loss": sum(self.losses) / max(len(self.losses), 1),
            "top1": [c / n if n else 0.0 for c, n in zip(self.correct, self.counted, strict=True)],
        }


def _lr_lambda(warmup: int, total: int) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    return f


def _epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1000 + epoch).shuffle(order)
    return order


def _loss_anchors(seq: dict, prompt_fraction: float, seed: int, epoch: int, idx: int) -> torch.Tensor:
    """Every answer anchor, plus a seeded share of prompt anchors (anchor a predicts position a + 1)."""
    n = len(seq["features"])
    answer_start = max(seq["prompt_len"] - 2, 0)  # anchors whose prediction falls in the answer
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch * 7919 + idx)
    prompt = torch.nonzero(torch.rand(answer_start, generator=g) < prompt_fraction).flatten()
    return torch.cat([prompt, torch.arange(answer_start, n - 1)])


def _save_checkpoint(path: Path, draft, opt, sched, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": draft.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def _resume(path: Path, draft, opt, sched, log: Log) -> int:
    if not path.exists():
        return 0
    state = torch.load(path, weights_only=True)
    draft.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    sched.load_state_dict(state["sched"])
    log(f"resumed from {path} at step {state['step']}")
    return int(state["step"])


def _digest(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def _folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 1e6
