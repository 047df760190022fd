"""Assemble and start the torchrun job for `specdec-eval run --gpus N`, and turn a failed job into one line that
names the rank and its error.

torchrun's agent already does the hard part of failure handling: when any worker exits non-zero (an exception,
SIGKILL, OOM kill), it terminates the others and exits non-zero. We keep its stderr flowing to the user and read
its failure summary ("rank : R (local_rank: L)", "exitcode : X") to say who failed."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass


@dataclass
class TorchrunSpec:
    nproc_per_node: int
    nnodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_backend: str | None = None
    job_file: str = "JOB.json"  # the serialised job every rank reads (`rank_main`)

    def torchrun_args(self) -> list[str]:
        args = [f"--nnodes={self.nnodes}", f"--nproc-per-node={self.nproc_per_node}"]
        if self.nnodes == 1 and not self.rdzv_endpoint:
            args.insert(0, "--standalone")  # a private rendezvous on a free local port: no port clashes
        if self.node_rank is not None:
            args.append(f"--node-rank={self.node_rank}")
        if self.rdzv_backend:
            args.append(f"--rdzv-backend={self.rdzv_backend}")
        if self.rdzv_endpoint:
            args.append(f"--rdzv-endpoint={self.rdzv_endpoint}")
        args.append("--max-restarts=0")  # an accuracy run that lost a rank is not retried behind the user's back
        return [*args, "-m", "specdec_eval.launch.rank_main", self.job_file]

    def display(self) -> str:
        """The command a torchrun user would type (torchrun is `python -m torch.distributed.run`)."""
        return shlex.join(["torchrun", *self.torchrun_args()])

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", *self.torchrun_args()]


@dataclass
class RankFailure:
    rank: int
    exitcode: int | None
    detail: str

    def describe(self) -> str:
        how = f"exit code {self.exitcode}" if self.exitcode is None or self.exitcode >= 0 else None
        if how is None:
            how = f"signal {_signal_name(-self.exitcode)}"
        return f"rank {self.rank} failed ({how}){': ' + self.detail if self.detail else ''}"


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return str(num)


_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_ERROR = re.compile(r"^\s*(?:error_file|traceback|message)\s*:\s*(.*)$")
_EXC_LINE = re.compile(r"^[A-Za-z_.]*(Error|Exception|Exit)\b.*:")


def parse_failures(stderr_lines: list[str]) -> list[RankFailure]:
    """Failures from torchrun's summary block, first (root cause) first; a rank's own last exception line is used
    as its detail when torchrun has no error file for it."""
    failures: list[RankFailure] = []
    current: dict | None = None
    root_index = None
    for line in stderr_lines:
        if "Root Cause" in line:
            root_index = len(failures)  # the next rank block is the first observed failure
        elif m := _RANK.match(line):
            current = {"rank": int(m.group(1)), "exitcode": None, "detail": ""}
            failures.append(RankFailure(**current))
        elif current is not None and (m := _EXIT.match(line)):
            failures[-1].exitcode = int(m.group(1))
        elif current is not None and (m := _ERROR.match(line)) and m.group(1).strip() not in ("", "<N/A>"):
            if not failures[-1].detail and not m.group(1).startswith("To enable traceback"):
                failures[-1].detail = m.group(1).strip()[:200]
    ours = [ln.strip() for ln in stderr_lines if ln.strip().startswith("specdec-eval: error:")]
    last_exception = ours[-1] if ours else ""
    last_exception = last_exception or next(
        (ln.strip() for ln in reversed(stderr_lines) if _EXC_LINE.match(ln.strip())), ""
    )
    for f in failures:
        if not f.detail and last_exception and f.exitcode is not None and f.exitcode > 0:
            f.detail = last_exception[:200]
    if root_index is not None and root_index < len(failures):
        failures.insert(0, failures.pop(root_index))
    # Ranks torchrun itself stopped (SIGTERM) after the root cause are consequences, not failures to report.
    return [f for i, f in enumerate(failures) if i == 0 or f.exitcode != -signal.SIGTERM]


def start(spec: TorchrunSpec, env: dict[str, str]) -> tuple[int, list[RankFailure]]:
    """Run the job with exactly this environment; stderr is relayed live and kept for the failure summary.
    Returns (exit code, failures)."""
    proc = subprocess.Popen(spec.argv(), stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
    lines: list[str] = []

    def relay() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            sys.stderr.write(line)
            sys.stderr.flush()

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()  # torchrun forwards the signal to its workers
        code = proc.wait()
    thread.join(timeout=5)
    return code, (parse_failures(lines) if code else [])
