"""The clean matrix behind `specdec-eval selftest --clean`: no unmutated run ever FAILs.

A FAIL means something only while a correct engine never gets one. Each row is one `run` with nothing planted, on
every backend and mode the tool supports: our engine (float32 and bfloat16, tiny and SmolLM2, greedy and sampled,
paired twins and a separate baseline), our `serve` over HTTP (a spec-dec server judged against a plain one), and
llama.cpp's server (its shapes: legacy logprobs keyed by text, scoring as text, its echo one position back; both
servers plain, since its prompt lookup is shown not lossless on this GGUF, a real defect and no false FAIL). A row
whose verdict or exit status says FAIL is a false FAIL; NO-GATE is allowed (a gate that could not judge).

Each row runs `specdec-eval run ... --json` as a process of its own (a server row starts its servers with
`--serve-cmd`), so a row is exactly what a user runs. A new backend is one more `CleanRow` in `ROWS`."""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...gates import recorded
from ...gates.lossless import GATE as LOSSLESS
from ...peers.profiles.llamacpp import LlamaCppServeCommand

SAMPLED = ("--gen-kwargs", "temperature=0.7")


@dataclass(frozen=True)
class CleanRow:
    """One unmutated run: `args` are `run`'s options beyond the shared ones (data, documents, lengths, runs folder);
    `{spec}` / `{base}` in them stand for the two servers' URLs (`{spec_port}` / `{base_port}` their ports), `{exe}`
    for `specdec-eval`, `{py}` for this Python, `{gguf}` for the embedded SmolLM2 GGUF. `needs`: a module the row
    needs (else it is skipped, saying so)."""

    name: str
    backend: str
    args: tuple[str, ...]
    needs: str | None = None

    @property
    def sampled(self) -> bool:
        return SAMPLED[1] in self.args


def _ours(model: str, dtype: str, sampled: bool, baseline: str) -> CleanRow:
    mode = f"{dtype}, {'sampled' if sampled else 'greedy'}, {baseline}"
    args = ("--model", model, "--spec", "eagle3", "--dtype", dtype, "--baseline", baseline)
    return CleanRow(f"ours {model}: {mode}", "local", args + (SAMPLED if sampled else ()))


SERVE = "{exe} serve --model tiny --host 127.0.0.1"
LLAMA = " ".join(LlamaCppServeCommand("{py}", "{gguf}", logits_all=True).argv)  # the profile's launch command


def _served(
    name: str, spec_cmd: str, plain_cmd: str, run_args: tuple[str, ...], sampled: bool, needs: str | None = None
) -> CleanRow:
    args = (
        "--endpoint",
        "{spec}",
        "--serve-cmd",
        spec_cmd + " --port {spec_port}",
        "--baseline-endpoint",
        "{base}",
        "--baseline-serve-cmd",
        plain_cmd + " --port {base_port}",
        *run_args,
    )
    mode = "sampled" if sampled else "greedy"
    return CleanRow(f"{name}: {mode}", name.split()[0], args + (SAMPLED if sampled else ()), needs)


ROWS: tuple[CleanRow, ...] = (
    *(
        _ours(m, d, s, b)
        for m in ("tiny", "smollm2")
        for d in ("float32", "bfloat16")
        for s in (False, True)
        for b in ("paired", "separate")
    ),
    *(
        _served(
            "serve eagle3 (rejection) vs plain",
            f"{SERVE} --spec eagle3 --spec-sampling rejection",
            SERVE,
            ("--model", "tiny", "--spec", "eagle3", "--draft-len", "3", "--control"),
            s,
        )
        for s in (False, True)
    ),
    *(
        _served(
            "llamacpp plain vs plain",
            LLAMA,
            LLAMA,
            ("--model", "smollm2", "--spec", "ngram", "--draft-len", "3", "--concurrency", "1", "--control"),
            s,
            "llama_cpp",
        )
        for s in (False, True)
    ),
)


def select_rows(only: Sequence[str] | None) -> list[CleanRow]:
    """The rows whose name contains any of the given words (comma-separated; all rows when none)."""
    words = [w.strip() for item in only or () for w in item.split(",") if w.strip()]
    rows = [r for r in ROWS if not words or any(w in r.name for w in words)]
    if not rows:
        raise UserError(f"--only: no clean row matches {', '.join(words)} (rows: {'; '.join(r.name for r in ROWS)})")
    return rows


def run_clean(
    rows: Sequence[CleanRow],
    shared: Sequence[str],
    note: Callable[[str], None] = lambda line: None,
    workdir: str | None = None,
) -> dict[str, Any]:
    """Every row as its own `run` (shared: the options every row takes: data, documents, lengths); the table and the
    false-FAIL count (JSON-ready)."""
    out = []
    for i, row in enumerate(rows, 1):
        note(f"[{i}/{len(rows)}] {row.name} ...")
        result = _run_row(row, shared, workdir)
        note(
            f"[{i}/{len(rows)}] {row.name}: {result['result']} ({LOSSLESS.name} {result[LOSSLESS.name]}, "
            f"{result['elapsed_s']:.0f} s){' - ' + result['reason'] if result.get('reason') else ''}"
        )
        out.append(result)
    false_fails = sum(r["result"] == "FALSE FAIL" for r in out)
    errors = sum(r["result"] == "ERROR" for r in out)
    return {"ok": false_fails == 0 and errors == 0, "false_fails": false_fails, "errors": errors, "rows": out}


def _run_row(row: CleanRow, shared: Sequence[str], workdir: str | None) -> dict[str, Any]:
    base = {"row": row.name, "backend": row.backend}
    if row.needs and importlib.util.find_spec(row.needs) is None:
        return {
            **base,
            "result": "SKIPPED",
            LOSSLESS.name: "-",
            "elapsed_s": 0.0,
            "reason": f"{row.needs} is not installed (pip install -e '.[peer]')",
        }
    with tempfile.TemporaryDirectory(prefix="clean-", dir=workdir) as out:
        ports = (_free_port(), _free_port())
        args = [_fill(a, ports) for a in row.args]
        cmd = [_console_script(), "run", *shared, *args, "--out", out, "--json"]
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        elapsed = round(time.perf_counter() - started, 1)
    return {**base, **judge_row(done.returncode, done.stdout, done.stderr), "elapsed_s": elapsed}


def judge_row(code: int, stdout: str, stderr: str) -> dict[str, Any]:
    """A row's result from its run's exit status and JSON summary: FALSE FAIL when any gate FAILed or the run exited
    1; ERROR when it did not finish (exit 2 or other: the last line of its output says why); else PASS (NO-GATE
    included: a gate that could not judge)."""
    try:
        summary = json.loads(stdout)
    except json.JSONDecodeError:
        summary = None
    tasks = (summary or {}).get("tasks") or {}
    lossless = [
        ((t.get(LOSSLESS.key) or {}).get("verdict"), (t.get(LOSSLESS.key) or {}).get("reason", ""))
        for t in tasks.values()
    ]
    verdicts = {v for v, _ in lossless if v}
    failed = [(v, why) for v, why in lossless if v == "FAIL"]
    row: dict[str, Any] = {LOSSLESS.name: ", ".join(sorted(verdicts)) or "-", "exit": code}
    if summary is None or code not in (0, 1):
        lines = [ln for ln in (stderr or stdout or "").splitlines() if ln.strip()]
        return {**row, "result": "ERROR", "reason": lines[-1][:300] if lines else f"exit status {code}"}
    if failed or code == 1:
        reason = failed[0][1] if failed else _failing_line(summary, stderr)
        return {**row, "result": "FALSE FAIL", "reason": reason[:400]}
    return {**row, "result": "PASS"}


def _failing_line(summary: dict[str, Any], stderr: str) -> str:
    """Why a run without a lossless FAIL exited 1: another gate, failing events or failed requests."""
    for task, t in (summary.get("tasks") or {}).items():
        for gate in ("verdict", *(g.key for g in recorded() if g is not LOSSLESS)):  # the task's own, then each gate's
            found = t.get(gate)
            verdict = found.get("verdict") if isinstance(found, dict) else found
            if verdict == "FAIL":
                return f"{task}: {gate} FAIL"
    lines = [ln for ln in stderr.splitlines() if "FAIL" in ln or "failed" in ln]
    return lines[-1] if lines else "exit status 1"


def _fill(arg: str, ports: tuple[int, int]) -> str:
    """A row's argument with its placeholders filled."""
    return arg.format(
        exe=_console_script(),
        py=sys.executable,
        gguf=_gguf() if "{gguf}" in arg else "",
        spec=f"http://127.0.0.1:{ports[0]}",
        base=f"http://127.0.0.1:{ports[1]}",
        spec_port=ports[0],
        base_port=ports[1],
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gguf() -> str:
    from ...workers.loading.checkpoint import smollm2_path

    return str(smollm2_path())


def _console_script() -> str:
    """`specdec-eval` of this environment."""
    beside = Path(sys.executable).with_name("specdec-eval")
    found = str(beside) if beside.exists() else shutil.which("specdec-eval")
    if found is None:
        raise UserError("the clean matrix runs `specdec-eval run`, which is not installed beside this Python")
    return found
