"""`specdec-eval draft train`: train the Eagle3 head of a target on GSM8K, on this machine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from ..workers.draft_training.trainer import DraftTrainConfig
from . import options as o
from .progress import stderr

app = typer.Typer(help="Train Eagle3 draft heads.", no_args_is_help=True)
T = DraftTrainConfig()


def _positive(value: float) -> float:
    if not value > 0:
        raise typer.BadParameter(f"must be > 0, got {value}")
    return value


@app.command("train")
def train(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the head (config.json, model.safetensors, training.json).")
    ] = Path("draft-heads/smollm2-eagle3"),
    work_dir: Annotated[
        Path | None,
        typer.Option(
            "--work-dir",
            help="Collected data and checkpoints; rerunning with the same folder resumes"
            " (default: runs/draft-train/OUT-NAME).",
        ),
    ] = None,
    model: o.Model = T.model,
    data_dir: Annotated[
        str | None,
        typer.Option("--data-dir", help="Folder with gsm8k/train.jsonl (else $SPECDEC_EVAL_DATA, else the hub)."),
    ] = None,
    num_prompts: Annotated[
        int, typer.Option("--num-prompts", min=1, help="GSM8K train questions answered by the target.")
    ] = T.num_prompts,
    num_shots: Annotated[
        int, typer.Option("--num-shots", min=0, max=64, help="Examples per training prompt.")
    ] = T.num_shots,
    epochs: Annotated[int, typer.Option("--epochs", min=1)] = T.epochs,
    ttt_steps: Annotated[
        int, typer.Option("--ttt-steps", min=1, max=16, help="Drafting steps trained (training-time test).")
    ] = T.ttt_steps,
    draft_vocab_size: Annotated[int, typer.Option("--draft-vocab-size", min=1)] = T.draft_vocab_size,
    lr: Annotated[float, typer.Option("--lr", callback=_positive, help="Learning rate (> 0).")] = T.lr,
    seed: Annotated[int, typer.Option("--seed", min=0)] = T.seed,
) -> None:
    """Collect the target's own greedy answers to GSM8K train questions (its three captured layers and its
    predictions at every position), then train an Eagle3 head with the training-time-test objective.

    The defaults take about 40 minutes on a 2-core CPU and reproduce the head that ships with the embedded
    model (workers/spec/heads/smollm2-eagle3). Measure it with:
      specdec-eval run --tasks gsm8k --limit 200 --spec eagle3 --draft-model OUT --data-dir ../shared/data

    Examples:
      specdec-eval draft train --data-dir ../shared/data
      specdec-eval draft train --data-dir ../shared/data --num-prompts 32 --epochs 1 -o /tmp/head   # quick look
    """
    from ..errors import UserError
    from ..evals.tasks.gsm8k import load_gsm8k_split
    from ..workers.draft_training.trainer import train_draft

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder for the head")
    cfg = DraftTrainConfig(
        model=model,
        num_prompts=num_prompts,
        num_shots=num_shots,
        epochs=epochs,
        ttt_steps=ttt_steps,
        draft_vocab_size=draft_vocab_size,
        lr=lr,
        seed=seed,
    )
    docs = load_gsm8k_split(data_dir, "train")
    start = time.perf_counter()

    def log(message: str) -> None:
        stderr.print(f"[{time.perf_counter() - start:6.0f} s] {message}", markup=False, highlight=False)

    summary = train_draft(cfg, docs, work_dir or Path("runs") / "draft-train" / out.name, out, log)
    last = summary["history"][-1] if summary["history"] else {}
    print(
        f"head: {out}  train top-1 per step: {' '.join(f'{a:.2f}' for a in last.get('top1', []))}  "
        f"total {summary['total_s']:.0f} s"
    )
