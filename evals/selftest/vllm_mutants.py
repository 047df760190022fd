"""The bug-class matrix on a real vLLM (`selftest --mutants --engine vllm`): bugs planted in vLLM's own rejection
sampler and proposer by the test-only plugin (tests/vllm_plugin), each judged by the default `run --endpoint`.

Two servers over the exported model: a plain one, decoded once as the lossless baseline every class's run names
(`--baseline RUN`), and one speculating server (Eagle3 with the shipped head) that serves every class in turn: the
plugin reads the live class from a file at each speculative step, so the matrix writes the next class's name there
between runs (an empty file is vLLM untouched, the unmutated row, run first). The seed's shape, an out-of-memory
error in the first speculative step, kills vLLM's engine core, so it runs last. Each run is the default one of the
local matrix (`mutants.matrix_options`), with the spec server's log read for its events. No shipped acceptance
reference holds for a served head, so the unmutated row writes one (`--populate-acceptance`, as TensorRT-LLM's
populate switch measures a known-good build) and every class's run is judged against it (`--acceptance-refs`): a
drafter that never matches collapses its acceptance below it. vLLM leaves per-request acceptance out of answers that
end at a stop string, so the per-document paired test has nothing to pair on GSM8K; the run-wide reference does not
need it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...peers.client.options import EndpointOptions
from ...peers.profiles.vllm import SERVED_MODEL, VLLMServeCommand
from ...peers.server.process import ServerProcess, ServerStartFailed
from ...results.store import Run
from ...workers import bug_classes
from ...workers.config import EngineConfig
from ..pipeline.backends import RunTarget, make_backend
from ..pipeline.evaluation import EvalOptions
from ..pipeline.run import run
from ..run_types import RunPlan
from .mutants import CLEAN, GATES, BugClass, evaluation_order, judge, matrix_options, paired_cell

PLUGIN = "specdec_vllm_mutants"  # tests/vllm_plugin, installed into the vLLM venv
PLUGIN_ENV = "SPECDEC_EVAL_VLLM_MUTANT"
ERROR_LINE = re.compile(r"\b[A-Z]\w*(Error|Exception): ")
STARTUP_TIMEOUT_S = 600.0  # 35-100 s measured alone on the shared 2-core machine; more while the other server starts

VLLM_CLEAN = BugClass("unmutated", "vLLM with the plugin loaded and no class live: every gate must PASS", catcher=None)
# The rows of the vLLM classes, each declared once (in the planted-class registry, which the plugin is held to).
VLLM_CLASSES = tuple(BugClass(c.name, c.help, catcher=c.catcher) for c in bug_classes.VLLM_CLASSES)
VLLM_CLASS_NAMES = tuple(b.name for b in VLLM_CLASSES)


@dataclass(frozen=True)
class VllmSetup:
    """Where vLLM and the model it serves are: the vLLM venv (its own: vLLM pins its own transformers), the
    exported Hugging Face folder, the Eagle3 head, and the server's sizes."""

    venv: str
    model_dir: str
    head: str
    draft_len: int = 3
    kv_cache_gib: int = 1
    max_model_len: int = 2048

    @property
    def python(self) -> str:
        return str(Path(self.venv) / "bin" / "python")

    def serve_cmd(self, port: int, class_file: Path | None) -> str:
        """A `--serve-cmd` string: plain without `class_file`, else speculating with the plugin reading it (the
        server's flags from the one builder the setup and the tests use too)."""
        cmd = VLLMServeCommand(
            self.python,
            self.model_dir,
            port,
            method=None if class_file is None else "eagle3",
            head=self.head,
            draft_len=self.draft_len,
            kv_gib=self.kv_cache_gib,
            max_model_len=self.max_model_len,
            served_model=SERVED_MODEL,
        )
        env = cmd.env if class_file is None else {**cmd.env, PLUGIN_ENV: f"@{class_file}"}
        return shlex.join([f"{k}={v}" for k, v in env.items()] + cmd.argv)

    def check(self) -> None:
        """One line for each thing missing, before any server starts (UserError)."""
        if not Path(self.python).is_file():
            raise UserError(f"no vLLM venv at {self.venv} (make setup-vllm, or --vllm-venv)")
        if not (Path(self.model_dir) / "config.json").is_file():
            raise UserError(f"no exported model in {self.model_dir} (specdec-eval export, or --vllm-model-dir)")
        probe = subprocess.run([self.python, "-c", f"import {PLUGIN}"], capture_output=True, text=True)
        if probe.returncode != 0:
            raise UserError(
                f"the planted-bug plugin is not installed in {self.venv}: "
                f"{self.python} -m pip install --no-deps -e tests/vllm_plugin"
            )


def select_vllm_classes(only: Sequence[str] | None) -> list[BugClass]:
    """The unmutated row first, then the classes asked for (default all) in the table's order: the one that kills
    the engine core last."""
    names = [n.strip() for item in only or () for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in VLLM_CLASS_NAMES]
    if unknown:
        raise UserError(f"--only: unknown vLLM bug class {', '.join(unknown)} (known: {', '.join(VLLM_CLASS_NAMES)})")
    return [VLLM_CLEAN] + [b for b in VLLM_CLASSES if not names or b.name in names]


@dataclass(frozen=True)
class MatrixServers:
    """Two vLLM servers that answer already: the plain one and the speculating one whose plugin reads the live
    class from `class_file`, its output in `spec_log`. The matrix starts its own unless given these (the tests share
    theirs with their other vLLM checks; a start costs 35-100 s)."""

    plain_url: str
    spec_url: str
    spec_log: Path
    class_file: Path
    startup_s: dict[str, float]


def run_vllm_matrix(
    setup: VllmSetup,
    config: EngineConfig,
    options: EvalOptions,
    classes: Sequence[BugClass],
    note: Callable[[str], None] = lambda line: None,
    workdir: str | None = None,
    servers: MatrixServers | None = None,
) -> dict[str, Any]:
    """Start both servers (unless `servers` are given), decode the plain baseline once, then every class's run on
    the spec server; returns the matrix (JSON-ready, the local matrix's shape plus each server's start-up seconds).
    The last class may leave the spec server dead (the out-of-memory one kills its engine core)."""
    setup.check()
    with tempfile.TemporaryDirectory(prefix="vllm-mutants-", dir=workdir) as tmp:
        tmp_path = Path(tmp)
        if servers is not None:
            rows = _matrix_rows(config, options, classes, note, tmp_path, servers)
        else:
            class_file = tmp_path / "class"
            class_file.write_text("")
            plain_port, spec_port = _free_ports(2)
            plain = ServerProcess(setup.serve_cmd(plain_port, None), tmp_path / "plain.log")
            spec = ServerProcess(setup.serve_cmd(spec_port, class_file), tmp_path / "spec.log")
            try:
                started = time.perf_counter()
                note("starting vLLM: a plain server and a speculating one (Eagle3) ...")
                startup = {"plain": _ready(plain.start(), plain_port)}  # one at a time: two start-ups at once fight
                startup["spec"] = _ready(spec.start(), spec_port)  # for the two cores and double the wait
                note(f"servers ready after {time.perf_counter() - started:.0f} s")
                servers = MatrixServers(_url(plain_port), _url(spec_port), spec.log_path, class_file, startup)
                rows = _matrix_rows(config, options, classes, note, tmp_path, servers)
            finally:
                spec.stop(), plain.stop()
    ok = all(r["result"] in ("caught", "PASS") for r in rows)
    return {
        "ok": ok,
        "model": f"vLLM {SERVED_MODEL} (Eagle3, K={setup.draft_len})",
        "limit": options.limit,
        "rows": rows,
        "gates": list(GATES),
        "startup_s": servers.startup_s,
    }


def _matrix_rows(
    config: EngineConfig,
    options: EvalOptions,
    classes: Sequence[BugClass],
    note: Callable[[str], None],
    tmp_path: Path,
    servers: MatrixServers,
) -> list[dict[str, Any]]:
    """The plain baseline once, then one row per class, the class file naming the live one during its run."""
    refs = tmp_path / "acceptance_length.yaml"  # written by the unmutated row, read by every row after it
    baseline = _plain_run(config, options, servers.plain_url, tmp_path / "runs")
    rows, unmutated = [], None
    try:
        for i, bug in enumerate(classes, 1):
            servers.class_file.write_text("" if bug.is_clean else bug.name)
            note(f"[{i}/{len(classes)}] {bug.name}: {bug.what}")
            row, samples = _class_row(bug, config, options, servers, tmp_path, baseline, unmutated, refs)
            unmutated = samples if bug.is_clean else unmutated
            cells = ", ".join(f"{gate} {row['cells'][gate]['verdict']}" for gate in GATES)
            note(f"[{i}/{len(classes)}] {bug.name}: {row['result']} ({row['elapsed_s']:.0f} s; {cells})")
            rows.append(row)
    finally:
        servers.class_file.write_text("")  # a shared spec server is untouched again once the matrix is done
    return rows


def _ready(server: ServerProcess, port: int) -> float:
    """Seconds until it answered; a server that died names the first exception its log printed (vLLM's root
    cause lies far above the last lines the failure shows)."""
    try:
        return round(server.wait_ready(_url(port), STARTUP_TIMEOUT_S), 1)
    except ServerStartFailed as e:
        text = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
        causes = [line.strip() for line in text.splitlines() if ERROR_LINE.search(line)]
        raise ServerStartFailed(f"{e}\nfirst exception in the log: {causes[0]}" if causes else str(e)) from None


def _plain_run(config: EngineConfig, options: EvalOptions, url: str, out: Path) -> str:
    """The plain server's run of the matrix's documents: the baseline each class's run names."""
    plain = replace(config, spec=None)
    # every document (no early stop): a run that stopped early cannot be a baseline
    plan = RunPlan(replace(matrix_options(options, CLEAN), early_stop=False), out=str(out), resume=False)
    summary = run(plan, make_backend("endpoint", RunTarget(plain, endpoint=EndpointOptions(endpoint=url))))
    return summary.run_dir


def _class_row(
    bug: BugClass,
    config: EngineConfig,
    options: EvalOptions,
    servers: MatrixServers,
    tmp: Path,
    baseline: str,
    unmutated: list | None,
    refs: Path,
) -> tuple[dict[str, Any], list]:
    """One class's row and its run's samples. A class that changes no output but the drafts is judged as `compare`
    and `ab` judge two commits: its per-document acceptance against the unmutated run's (a single run has no
    acceptance reference for a served head: there is none for vLLM's)."""
    endpoint = EndpointOptions(endpoint=servers.spec_url, server_log=str(servers.spec_log))
    judged = replace(matrix_options(options, bug), acceptance_refs=str(refs))
    if bug.is_clean:  # the reference every class's acceptance is judged against: a full, clean run writes it
        judged = replace(judged, early_stop=False)
    plan = RunPlan(judged, out=str(tmp / "runs"), resume=False, baseline=baseline, populate_acceptance=bug.is_clean)
    started = time.perf_counter()
    summary = run(plan, make_backend("endpoint", RunTarget(config, endpoint=endpoint)))
    elapsed = time.perf_counter() - started
    samples = Run(Path(summary.run_dir)).samples()
    paired = paired_cell(unmutated, samples, elapsed) if not bug.is_clean else None
    row = judge(bug, summary, elapsed, evaluation_order(summary), paired)
    if bug.is_clean:  # what the rows after it are judged against, or why nothing was written
        row["acceptance_reference"] = summary.acceptance_populated
    if not bug.is_clean and not _fired(servers.spec_log, bug.name):
        row["never_fired"] = [bug.name]  # the matrix prints a warning: the plugin never acted
    return row, samples


def _fired(log: Path, name: str) -> bool:
    """Whether the plugin logged that the class acted (it logs the first time only)."""
    return log.exists() and f"planted class {name} fired" in log.read_text(errors="replace")


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def _free_ports(n: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def default_setup(venv: str | None, model_dir: str | None, head: str, draft_len: int) -> VllmSetup:
    """The vLLM venv and model folder `make setup-vllm` makes (VLLM_VENV and VLLM_MODEL_DIR override them)."""
    venv = venv or os.environ.get("VLLM_VENV") or ".venv-vllm"
    model_dir = model_dir or os.environ.get("VLLM_MODEL_DIR") or str(Path(venv) / "smollm2-hf")
    return VllmSetup(
        venv=str(Path(venv).resolve()),
        model_dir=str(Path(model_dir).resolve()),
        head=str(Path(head).resolve()),
        draft_len=draft_len,
    )
