"""The per-rank entry of a torchrun job: `python -m specdec_eval.launch.rank_main JOB.json`.

Every rank reads the serialised job, joins the process groups, and builds its engine (TP size
from the layout); rank 0 then calls the job's driver with a `ShardedEngine` over every replica and leaves the
driver's result in the launcher's result file, while the other ranks serve until rank 0 says stop."""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import UserError
from .dist import RankEnv, world_session
from .job import Job
from .layout import plan_layout


def load_driver(name: str):
    """The job's driver, a library function; a command module is refused: launch sits below the CLI."""
    module, _, func = name.partition(":")
    if module == "specdec_eval.cli" or module.startswith("specdec_eval.cli."):
        raise UserError(f"job driver {name!r} is in cli/; drivers are library functions (launch/job.py)")
    return getattr(importlib.import_module(module), func)


def rank_main(job: Job, result_file: str | None, env: RankEnv) -> dict[str, Any] | None:
    from ..workers.engine.engine import Engine
    from ..workers.loading.checkpoint import load_checkpoint
    from .dispatch import ShardedEngine, serve_forever
    from .serving import ShardedServingEngine, serve_steps_forever

    serving = job.mode == "serving"  # a server drives rank 0 one step at a time (`serving`)

    checkpoint = load_checkpoint(job.engine.model)
    cfg = checkpoint.config
    layout = plan_layout(env.world_size, cfg.num_attention_heads, cfg.num_key_value_heads, job.tp)
    device_type = "cuda" if job.engine.device.startswith("cuda") else "cpu"
    with world_session(env, device_type, layout, job.rank_timeout_s) as world:
        engine = Engine.build(replace(job.engine, tp_size=layout.tp), world.tp, checkpoint)
        if world.rank != 0:
            (serve_steps_forever if serving else serve_forever)(engine, world)
            return None
        sharded = (ShardedServingEngine if serving else ShardedEngine)(engine, world)
        try:
            result = load_driver(job.driver)(sharded, job.payload)
        finally:
            sharded.close()
        if result_file:
            Path(result_file).write_text(json.dumps(result), encoding="utf-8")
        return result


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m specdec_eval.launch.rank_main JOB.json (started by torchrun)", file=sys.stderr)
        sys.exit(2)
    job, result_file = Job.from_json(Path(args[0]).read_text(encoding="utf-8"))
    try:
        rank_main(job, result_file, RankEnv.from_environ())
    except UserError as e:
        print(f"specdec-eval: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
