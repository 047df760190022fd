"""Hostile-input probe: every case runs `python -m specdec_eval.cli.main ...` as its own process and must end
cleanly: the documented exit status (2 for anything a user can get wrong), one line on stderr starting
`specdec-eval: error:`, no traceback, and nothing written (each case runs in an empty scratch folder that is also
its `--out`, and must leave it empty; fixture files it reads must stay unchanged).

    python scripts/probe.py            # all cases, two at a time; prints one line per case, then `N/M clean`
    python scripts/probe.py -k fewshot # only cases whose name contains 'fewshot'

Exit status 0 only when every case is clean, or known: probe_cases.KNOWN lists cases whose fix is planned (printed
as "known, fixed in phase 2" with the reason, and counted apart in the last line). Cases use the `tiny` model with a
256 MiB budget and tiny data files written to a temporary folder, so none of them loads a real model or reads the
shared data.

The cases and their fixture files are in scripts/probe_cases.py (issue 27's, some of which check what a command
left behind or send it SIGTERM midway, in scripts/probe_cases_trust.py; issue 38's, with a misbehaving
OpenAI-compatible server of their own, in scripts/probe_cases_hardening.py). The HTTP server (`specdec-eval serve`) is
a second group, probe_cases.SERVER_CASES: one `serve --model tiny` process gets every bad request and must answer
each with its 4xx JSON error and keep serving, then exit 0 on SIGTERM (see run_server_group); then
probe_cases.SERVER_SCENARIOS, which need a process, a stub server or a signal of their own (`--no-server` skips
both, `--server-only` runs only them).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# scripts/ is on sys.path (this script's own)
from probe_cases import (
    KNOWN,
    SERVER_CASES,
    SERVER_KEY,
    SERVER_SCENARIOS,
    Case,
    ScenarioContext,
    cli_cases,
    make_fixtures,
)
from probe_cases_trust import WATCHED as WATCHED_TRUST

CLI = [sys.executable, "-m", "specdec_eval.cli.main"]


@dataclass
class Outcome:
    case: Case
    problems: list[str] = field(default_factory=list)
    code: int | None = None
    seconds: float = 0.0
    stderr_tail: str = ""

    @property
    def clean(self) -> bool:
        return not self.problems


# --- running ----------------------------------------------------------------------------------------------------

ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200"}


def _digest(paths: list[Path]) -> dict[str, str]:
    out = {}
    for p in paths:
        for f in [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()):
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


class Started:
    """One case's process: `python -m specdec_eval.cli.main ARGS` (exec), or a fork of this interpreter, which has
    imported the package once, calling its main(ARGS) (fork: the same code path without the seconds of interpreter
    and torch start-up per case). Either way its cwd is the case's scratch folder and its output goes to files."""

    def __init__(self, case: Case, args: list[str], scratch: Path, fork: bool, fixtures: dict[str, str]) -> None:
        self.case, self.scratch, self.start = case, scratch, time.perf_counter()
        scratch.mkdir(parents=True)
        if case.setup is not None:
            case.setup(scratch)
        self.out, self.err = scratch.parent / f"{scratch.name}.out", scratch.parent / f"{scratch.name}.err"
        (scratch.parent / f"{scratch.name}.in").write_bytes(case.stdin)
        self.pid, self.popen, self.returncode, self.signalled = 0, None, None, False
        env = {k: v.format(scratch=scratch, **fixtures) for k, v in case.env.items()}
        if not fork:
            with (
                open(scratch.parent / f"{scratch.name}.in", "rb") as i,
                open(self.out, "wb") as o,
                open(self.err, "wb") as e,
            ):
                self.popen = subprocess.Popen(
                    CLI + args, cwd=scratch, stdin=i, stdout=o, stderr=e, env={**os.environ, **ENV, **env}
                )
            return
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            _child(args, scratch, scratch.parent / f"{scratch.name}.in", self.out, self.err, env)

    def signal_if_due(self) -> None:
        """SIGTERM once the case's stderr shows `signal_when` (a case that tests what a signal leaves behind)."""
        when = self.case.signal_when
        if when is None or self.signalled or self.returncode is not None:
            return
        if self.err.exists() and when in self.err.read_bytes().decode("utf-8", "replace"):  # a fork makes it
            os.kill(self.popen.pid if self.popen is not None else self.pid, signal.SIGTERM)
            self.signalled = True

    def poll(self) -> int | None:
        if self.popen is not None:
            self.returncode = self.popen.poll()
        elif self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.popen is not None:
            self.popen.kill()
            self.popen.wait()
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)


def _child(args: list[str], cwd: Path, stdin: Path, stdout: Path, stderr: Path, env: dict[str, str]) -> None:
    code = 1
    try:
        os.chdir(cwd)
        os.environ.update(env)
        tempfile.tempdir = None  # read TMPDIR again: the parent's cached temporary folder may not be the case's
        sys.argv = ["specdec-eval", *args]  # what a manifest records as the command, as `python -m` would see it
        for fd, path, mode in ((0, stdin, os.O_RDONLY), (1, stdout, os.O_WRONLY), (2, stderr, os.O_WRONLY)):
            os.dup2(os.open(path, mode | (os.O_CREAT | os.O_TRUNC if fd else 0), 0o644), fd)
        # Fresh stream objects: the parent's may hold unflushed text, and their buffers are not the child's.
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        from specdec_eval.cli.main import main as cli_main

        try:
            cli_main(args)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # what `python -m` would print for an uncaught exception
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def judge(s: Started, timed_out: float | None, fixtures: dict[str, str] | None = None) -> Outcome:
    case, outcome = s.case, Outcome(s.case, code=s.returncode, seconds=time.perf_counter() - s.start)
    if timed_out is not None:
        outcome.problems.append(f"timed out after {timed_out:.0f} s")
    err = s.err.read_bytes().decode("utf-8", "replace")
    lines = [line for line in err.splitlines() if line.strip()]
    outcome.stderr_tail = "\n".join(lines[-3:])
    if s.returncode != case.expect:
        outcome.problems.append(f"exit {s.returncode}, expected {case.expect}")
    if "Traceback" in err or b"Traceback" in s.out.read_bytes():
        outcome.problems.append("traceback")
    if case.prefix and (not lines or not lines[-1].startswith(case.prefix)):
        outcome.problems.append(f"last stderr line does not start with {case.prefix!r}")
    elif case.message and case.message not in lines[-1]:
        outcome.problems.append(f"error line lacks {case.message!r}")
    if len(lines) > 1 and not case.multiline:
        outcome.problems.append(f"{len(lines)} lines on stderr, expected one")
    left = sorted(str(x.relative_to(s.scratch)) for x in s.scratch.rglob("*"))
    if left and not case.keep:
        outcome.problems.append(f"left behind: {', '.join(left[:4])}")
    if case.check is not None:
        out = s.out.read_bytes().decode("utf-8", "replace")
        outcome.problems += case.check(s.scratch, out, err, fixtures)
    return outcome


def run_cli_group(
    cases: list[Case], root: Path, jobs: int, timeout: float, fork: bool, report: Callable[[Outcome], None]
) -> tuple[list[Outcome], list[str]]:
    """Run the cases `jobs` at a time (no threads: a fork must not copy another thread's locks); returns the
    outcomes in case order and the fixture files that changed."""
    fixtures = make_fixtures(root)
    watched = [Path(fixtures[k]) for k in ("store", "waives", "prompts_ok", "a_file", *WATCHED_TRUST)]
    before = _digest(watched)
    pending = list(enumerate(cases))
    running: dict[int, Started] = {}
    done: dict[int, Outcome] = {}
    while pending or running:
        while pending and len(running) < jobs:
            index, case = pending.pop(0)
            args = [a.format(**fixtures) if "{" in a else a for a in case.args]
            running[index] = Started(case, args, root / "scratch" / case.name, fork, fixtures)
        for index, started in list(running.items()):
            late = time.perf_counter() - started.start > timeout
            started.signal_if_due()
            if started.poll() is None and not late:
                continue
            if started.returncode is None:
                started.kill()
            done[index] = judge(started, timeout if late and started.returncode is None else None, fixtures)
            del running[index]
            report(done[index])
        time.sleep(0.02)
    after = _digest(watched)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if (root / "PICKLE-RAN").exists():
        changed.append("the pickle head ran code on load")
    return [done[i] for i in sorted(done)], changed


# --- the HTTP server group -----------------------------------------------------------------------------------------


def run_server_group(cases: list, report: Callable[[Outcome], None], timeout: float) -> list[Outcome]:
    """Start `specdec-eval serve --model tiny` on a free port with an API key, send each SERVER_CASES request, and
    check its status, that the error is JSON with a message, and that the server still answers /health and a good
    completion afterwards; then SIGTERM, which must end the server with exit status 0. One Outcome per case, plus
    one for the shutdown."""
    import httpx

    command = [
        *CLI,
        "serve",
        "--model",
        "tiny",
        "--device",
        "cpu",
        "--device-memory",
        "256MiB",
        "--port",
        "0",
        "--api-key",
        SERVER_KEY,
        "--log-level",
        "warning",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})
    lines: list[str] = []
    url = None
    for line in proc.stderr:  # the server prints the URL it bound once it listens
        lines.append(line)
        if m := re.search(r"listening on (http://\S+)", line):
            url = m.group(1)
            break
    if url is None:
        proc.kill()
        problem = Outcome(
            Case("serve-start", []),
            code=proc.wait(),
            seconds=time.perf_counter() - start,
            stderr_tail="".join(lines)[-800:],
        )
        problem.problems.append("the server did not start")
        report(problem)
        return [problem]
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    auth = {"Authorization": f"Bearer {SERVER_KEY}"}
    outcomes = []
    with httpx.Client(base_url=url, timeout=timeout) as http:
        for name, method, path, body, headers, expected in cases:
            t0 = time.perf_counter()
            sent = {**auth, **headers}
            sent = {k: v for k, v in sent.items() if v}
            raw = isinstance(body, bytes)
            response = http.request(
                method, path, content=body if raw else None, json=None if raw or body is None else body, headers=sent
            )
            outcome = Outcome(
                Case(name, [method, path]),
                code=response.status_code,
                seconds=time.perf_counter() - t0,
                stderr_tail=response.text[-400:],
            )
            if response.status_code not in expected:
                outcome.problems.append(f"status {response.status_code}, expected {'/'.join(map(str, expected))}")
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = None
            if not message:
                outcome.problems.append("no JSON error with a message")
            healthy = http.get("/health").status_code == 200
            good = http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "temperature": 0}, headers=auth)
            if not healthy or good.status_code != 200:
                outcome.problems.append(
                    f"server not serving after it (health {healthy}, completion {good.status_code})"
                )
            report(outcome)
            outcomes.append(outcome)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    shutdown = Outcome(
        Case("serve-sigterm", ["SIGTERM"]),
        code=code,
        seconds=time.perf_counter() - t0,
        stderr_tail="".join(lines)[-800:],
    )
    if code != 0 or "Traceback" in "".join(lines):
        shutdown.problems.append(f"exit {code} after SIGTERM" + (", with a traceback" if code == 0 else ""))
    report(shutdown)
    return [*outcomes, shutdown]


def run_scenarios(
    scenarios: list, root: Path, report: Callable[[Outcome], None], timeout: float, jobs: int
) -> list[Outcome]:
    """probe_cases.SERVER_SCENARIOS, `jobs` at a time (threads: each mostly waits on a process of its own)."""
    from concurrent.futures import ThreadPoolExecutor

    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **ENV}

    def run(index_scenario) -> list[Outcome]:
        index, scenario = index_scenario
        folder = root / str(index)
        folder.mkdir()
        start = time.perf_counter()
        results = scenario(ScenarioContext(CLI, env, folder, timeout))
        seconds = (time.perf_counter() - start) / max(1, len(results))
        return [Outcome(Case(name, []), problems, code, seconds, tail) for name, code, problems, tail in results]

    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(jobs) as pool:
        for batch in pool.map(run, enumerate(scenarios)):
            for outcome in batch:
                report(outcome)
            outcomes += batch
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="select", default="", help="only cases whose name contains this")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2: this machine's cores)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds one case may take")
    parser.add_argument("--no-server", action="store_true", help="skip the HTTP server group")
    parser.add_argument("--server-only", action="store_true", help="only the HTTP server group (and its scenarios)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder and print it")
    parser.add_argument(
        "--fork",
        action="store_true",
        help="fork this interpreter per case instead of starting "
        "`python -m specdec_eval.cli.main` (same code path, no per-case start-up; what the tests use)",
    )
    args = parser.parse_args(argv)
    os.environ.update(ENV)  # before anything imports the Hugging Face libraries, which read it once
    if args.fork:
        import specdec_eval.cli.main  # noqa: F401  (imported once, inherited by every forked case)

    cases = [c for c in cli_cases() if args.select in c.name and not args.server_only]
    root = Path(tempfile.mkdtemp(prefix="specdec-probe-"))
    start = time.perf_counter()

    def report(o: Outcome) -> None:
        known = KNOWN.get(o.case.name)
        status = "clean" if o.clean else ("known" if known else "DIRTY")
        line = f"{status:5}  {o.case.name:<36} exit {o.code}  {o.seconds:5.1f} s"
        if known is not None:  # planned: said every time, never hidden
            line += f"  ({'now clean: drop its KNOWN entry' if o.clean else 'known, fixed in phase 2'}: {known})"
        if not o.clean:
            line += "  " + "; ".join(o.problems) + "\n         " + o.stderr_tail.replace("\n", "\n         ")
        print(line, flush=True)

    try:
        outcomes, changed = run_cli_group(cases, root, args.jobs, args.timeout, args.fork, report)
        for what in changed:
            print(f"DIRTY  fixture changed: {what}")
        server_cases = [c for c in SERVER_CASES if args.select in c[0]]
        if server_cases and not args.no_server:
            outcomes += run_server_group(server_cases, report, args.timeout)
        scenarios = [run for names, run in SERVER_SCENARIOS if any(args.select in n for n in names)]
        if scenarios and not args.no_server:
            outcomes += run_scenarios(scenarios, root / "scenarios", report, args.timeout, args.jobs)
    finally:
        if args.keep:
            print(f"probe folder: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    clean = sum(o.clean for o in outcomes)
    known = sum(not o.clean and o.case.name in KNOWN for o in outcomes)
    mode = "forked" if args.fork else "python -m"
    print(
        f"{clean}/{len(outcomes)} clean in {time.perf_counter() - start:.0f} s ({mode}, {args.jobs} at a time)"
        + (f"; {known} known, fixed in phase 2" if known else "")
    )
    return 0 if clean + known == len(outcomes) and not changed else 1


if __name__ == "__main__":
    sys.exit(main())
