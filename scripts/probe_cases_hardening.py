"""Issue 38's cases of scripts/probe.py (hardening): no verdict from evidence that is not there, no server open by
accident, files read with a size and type limit, and one line instead of a traceback. Kept apart from
probe_cases.py so that other blocks of cases merge without touching this one; probe_cases.cli_cases(),
make_fixtures() and SERVER_SCENARIOS include it.

The endpoint items (issue 38's 1-9) run `run --endpoint` against `Misbehaving`, an OpenAI-compatible ASGI app of
this module on 127.0.0.1 (uvicorn in a thread), whose first path segment picks what it gets wrong: NaN, missing or
infinite logprobs, lying token ids, empty alternatives, impossible acceptance counts, extra and out-of-order
choices, failed requests. None is known to fail: every item's fix is in (the lossless gate's rules in
evals/lossless/evidence.py and baseline_rules.py, applied by the gate and the endpoint backend's checks)."""

from __future__ import annotations

import json
import math
import socket
import threading
from pathlib import Path
from typing import Any

from probe_cases import FAST, SERVER_CASES, Case, ScenarioContext, _cli, _one_error_line, _write

SMOKE_ENDPOINT = [
    "--model",
    "tiny",
    "--tasks",
    "gsm8k_smoke",
    "--limit",
    "4",
    "--no-reference",
    "--max-output-len",
    "16",
    "--request-retries",
    "0",
    "--json",
]
_HELD: list[socket.socket] = []  # the busy port's socket, open while the probe runs


def hardening_cases() -> list[Case]:
    serve = ["serve", *FAST, "--port", "{busy_port}"]  # a check that regressed fails at the bind, not by serving
    run = ["run", *FAST, "--tasks", "gsm8k_smoke", "--no-reference", "--limit", "1", "--out", "runs"]
    module_run = ["run", *FAST, "--tasks", "arith", "--no-reference", "--out", "runs"]
    # fmt: off
    return [
        # 10-11: no server open by accident
        Case("hard-serve-host-empty", [*serve, "--host", ""], message="--host is empty"),
        Case("hard-serve-api-key-empty", [*serve, "--api-key", ""], message="--api-key is empty"),
        Case("hard-serve-api-key-env-empty", serve, env={"SPECDEC_EVAL_API_KEY": ""}, message="--api-key is empty"),
        # 12: files with a size and type limit
        Case("hard-waive-dev-full", ["waive", "t1", "--bug", "b", "--file", "/dev/full"],
             message="waives file /dev/full: is a character device"),
        Case("hard-waives-dev-zero", ["waives", "--file", "/dev/zero"], message="is a character device"),
        Case("hard-unwaive-dev-zero", ["unwaive", "t1", "--file", "/dev/zero"], message="is a character device"),
        Case("hard-acceptance-refs-dev-zero", [*run, "--spec", "eagle3", "--acceptance-refs", "/dev/zero"],
             message="references file /dev/zero: is a character device"),
        Case("hard-generate-dev-zero", ["generate", "/dev/zero", *FAST],
             message="prompts file /dev/zero: is a character device"),
        # tracebacks: task modules, serve options, endpoint options
        Case("hard-task-module-raises-at-import", run, env={"SPECDEC_EVAL_TASK_MODULES": "{module_raises}"},
             message="raised RuntimeError on import"),
        Case("hard-task-module-syntax-error-run", run, env={"SPECDEC_EVAL_TASK_MODULES": "{module_syntax}"},
             message="has a syntax error at syntax.py:1"),
        Case("hard-task-module-syntax-error-runs-still-lists", ["runs", "--out", "{store_plain}"],
             env={"SPECDEC_EVAL_TASK_MODULES": "{module_syntax}"}, expect=0, prefix="", multiline=True,
             check=_lists_plain_run),  # `runs` reads run folders only: a broken module must not stop it
        Case("hard-task-module-tasks-not-specs", run, env={"SPECDEC_EVAL_TASK_MODULES": "{module_tasks_int}"},
             message="TASKS must be a list or tuple of TaskSpecs"),
        Case("hard-task-module-source-raises", module_run, env={"SPECDEC_EVAL_TASK_MODULES": "{module_source}"},
             message="FAMILY.source() raised KeyError"),
        # these fail inside the evaluation: the runs folder (its lock) may stay, no run folder may
        Case("hard-task-module-task-yaml-raises", module_run, env={"SPECDEC_EVAL_TASK_MODULES": "{module_yaml}"},
             message="FAMILY.task_yaml() raised ValueError", keep=True, check=_no_run_folder),
        Case("hard-task-module-live-correct-raises", module_run,
             env={"SPECDEC_EVAL_TASK_MODULES": "{module_live}"}, message="FAMILY.live_correct() raised", keep=True,
             check=_no_run_folder),
        Case("hard-serve-log-level-bogus", [*serve, "--log-level", "bogus"], message="--log-level must be one of"),
        Case("hard-run-request-timeout-inf", [*run, "--endpoint", "http://127.0.0.1:9", "--request-timeout", "inf"],
             message="request timeout must be a number of seconds"),
        Case("hard-run-endpoint-bad-ipv6", [*run, "--endpoint", "http://[::1:18801"],
             message="endpoint URL cannot be read (Invalid IPv6 URL)"),
        # smaller
        Case("hard-serve-grace-nan", [*serve, "--grace", "nan"], message="--grace must be a finite number"),
        Case("hard-serve-rank-timeout-negative", [*serve, "--rank-timeout", "-5"], message="--rank-timeout must be"),
        Case("hard-serve-max-request-bytes-zero", [*serve, "--max-request-bytes", "0"],
             message="--max-request-bytes must be at least 1 byte"),
        Case("hard-serve-tp-zero", [*serve, "--tp", "0"], message="--tp must be at least 1, got 0"),
        Case("hard-waive-bug-empty", ["waive", "t1", "--bug", "", "-f", "waives.txt"], message="--bug is empty"),
    ]
    # fmt: on


def _no_run_folder(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    left = [p.name for p in (scratch / "runs").glob("*") if p.is_dir()]
    return [f"run folders left behind: {', '.join(left)}"] if left else []


def _lists_plain_run(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    from probe_cases_trust import RUN_PLAIN

    return [] if RUN_PLAIN in out and "Traceback" not in err else [f"{RUN_PLAIN} is not listed"]


SERVER_CASES.extend(
    [
        ("hard-logprobs-true", "POST", "/v1/completions", {"prompt": "hi", "logprobs": True}, {}, (400,)),
        ("hard-logprobs-string", "POST", "/v1/completions", {"prompt": "hi", "logprobs": "5"}, {}, (400,)),
        ("hard-temperature-string", "POST", "/v1/completions", {"prompt": "hi", "temperature": "0.5"}, {}, (400,)),
        ("hard-prompt-booleans", "POST", "/v1/completions", {"prompt": [True, False]}, {}, (400,)),
        ("hard-prompt-floats", "POST", "/v1/completions", {"prompt": [1.0, 2.0]}, {}, (400,)),
        (
            "hard-chat-role-wizard",
            "POST",
            "/v1/chat/completions",
            {"messages": [{"role": "wizard", "content": "x"}]},
            {},
            (400,),
        ),
    ]
)


# --- fixtures -----------------------------------------------------------------------------------------------------

TASK_MODULE = """
from pathlib import Path

import yaml
from specdec_eval.evals.tasks.data import DataSource
from specdec_eval.evals.tasks.family import TaskFamily, TaskSpec

HERE = Path(__file__).parent


class Arith(TaskFamily):
    name = "arith"
    filters = ("none",)
    max_output_len = 4
    reference_dir = HERE

    def source(self, spec, data_dir):
        SOURCE
        path = str(HERE / "arith.jsonl")
        return DataSource("local:" + path, "json", {"test": path}, num_rows={"test": 1})

    def task_yaml(self, spec, source, stock, seed):
        TASK_YAML
        return yaml.safe_dump({"task": spec.lm_eval_name, "dataset_path": "json",
                               "dataset_kwargs": {"data_files": source.files}, "test_split": "test",
                               "output_type": "generate_until", "doc_to_text": "Q: {{question}} A:",
                               "doc_to_target": "{{answer}}", "generation_kwargs": {"until": ["Q:"]},
                               "metric_list": [{"metric": "exact_match"}], "metadata": {"version": 1.0}})

    def live_correct(self, output, doc):
        LIVE
        return None


FAMILY = Arith()
TASKS = (TaskSpec("arith", FAMILY),)
"""


def _task_module(folder: Path, source: str = "pass", task_yaml: str = "pass", live: str = "pass") -> str:
    """A one-question task module whose `source`, `task_yaml` or `live_correct` first runs the statement given."""
    _write(folder / "arith.jsonl", json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    text = TASK_MODULE.replace("SOURCE", source).replace("TASK_YAML", task_yaml).replace("LIVE", live)
    return str(_write(folder / "arith.py", text))


def hardening_fixtures(folder: Path) -> dict[str, str]:
    """Issue 38's fixture files under folder (and a port held busy on every interface); names for the
    {placeholders} of hardening_cases()."""
    busy = socket.create_server(("0.0.0.0", 0))
    _HELD.append(busy)
    return {
        "busy_port": str(busy.getsockname()[1]),
        "module_raises": str(_write(folder / "m1" / "raises.py", "raise RuntimeError('boom')\n")),
        "module_syntax": str(_write(folder / "m2" / "syntax.py", "def broken(:\n")),
        "module_tasks_int": str(
            _write(folder / "m3" / "tasks.py", "from specdec_eval.evals.tasks.gsm8k import FAMILY\nTASKS = 5\n")
        ),
        "module_source": _task_module(folder / "m4", source="raise KeyError('rows')"),
        "module_yaml": _task_module(folder / "m5", task_yaml="raise ValueError('no yaml')"),
        "module_live": _task_module(folder / "m6", live="raise ZeroDivisionError"),
    }


def _frames_scenario(ctx: ScenarioContext) -> list[tuple[str, int | None, list[str], str]]:
    """results.frames on what is not a run / not a store: an error saying so, never TypeError or an empty frame."""
    import subprocess
    import sys

    (ctx.root / "not-a-run").mkdir()
    _write(ctx.root / "a-file", "x")
    code = (
        "import sys\nfrom specdec_eval.results.frames import load_runs, load_samples\nfor call, arg in "
        "((load_samples, sys.argv[1]), (load_runs, sys.argv[2]), (load_runs, sys.argv[3])):\n    try:\n"
        "        call(arg)\n        print('no-error')\n    except Exception as e:\n"
        "        print(type(e).__name__)\n"
    )
    paths = [str(ctx.root / name) for name in ("not-a-run", "missing", "a-file")]
    p = subprocess.run(
        [sys.executable, "-c", code, *paths], capture_output=True, text=True, timeout=ctx.timeout, env=ctx.env
    )
    got = p.stdout.split()
    want = ["FileNotFoundError", "FileNotFoundError", "NotADirectoryError"]
    problems = [] if got == want else [f"frames raised {got}, expected {want}"]
    return [("hard-frames-not-a-run-or-store", p.returncode, problems, p.stderr[-400:])]


# --- the misbehaving server ----------------------------------------------------------------------------------------

ANSWER = " The answer is 56."
K_DIV = 2  # the position where a speculating answer departs from the plain one


class Misbehaving:
    """An OpenAI-compatible server (an ASGI app) that answers every prompt with ANSWER in the tiny preset's tokens,
    naming tokens by id (its model card says vLLM, so requests ask for return_tokens_as_token_ids) and giving 5
    alternatives per token. /MODE/v1/completions picks what it gets wrong:

    plain       the answer; at K_DIV the emitted token ties with ALT (a near-tie)
    nan         plain, ALT's logprob at K_DIV is NaN            (item 1)
    minus-inf   plain, ALT's logprob at K_DIV is -inf           (item 9's "(inf nats)")
    empty-alts  plain, no alternatives at K_DIV                 (item 3)
    spec        speculating: ALT at K_DIV, the plain token tied with it
    spec-far    speculating: ALT at K_DIV, the plain token 5.95 nats below it (item 3's other side)
    lying-ids   the plain answer's ids with another text        (item 2)
    acceptance  plain, claiming 50 accepted drafts of 3 drafted (item 5)
    choices     two choices for n = 1, out of order             (item 8)
    refuse      HTTP 400 for every request                      (item 9's failed requests)
    jitter      plain, every other answer to a prompt moves ALT's logprob by 1e-5 (a noise bound of 2e-05)"""

    def __init__(self) -> None:
        import uvicorn
        from specdec_eval.workers.loading.presets import tiny_tokenizer

        self.tok = tiny_tokenizer()
        self.plain = list(self.tok.encode(ANSWER, add_special_tokens=False))
        self.alt = self.tok.encode("X", add_special_tokens=False)[0]
        self.seen: dict[str, int] = {}
        self._lock = threading.Lock()
        sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(self, log_level="critical", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        mode, _, path = scope["path"].lstrip("/").partition("/")
        status, answer = self._route(mode, "/" + path, json.loads(body or b"{}"))
        raw = json.dumps(answer).encode()  # NaN and Infinity as Python writes them: what a careless server sends
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": raw})

    def _route(self, mode: str, path: str, body: dict) -> tuple[int, Any]:
        if path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "vllm"}]}
        if path != "/v1/completions":
            return 404, {"error": {"message": "not here"}}
        if mode == "refuse":
            return 400, {"error": {"message": "refused"}}
        with self._lock:  # the how-manyth answer to this prompt in this mode (the control is the second)
            key = f"{mode}:{body.get('prompt')}"
            self.seen[key] = turn = self.seen.get(key, 0) + 1
        return 200, self._completion(mode, turn)

    def _completion(self, mode: str, turn: int) -> dict[str, Any]:
        speculating = mode in ("spec", "spec-far")
        ids = list(self.plain)
        if speculating:
            ids[K_DIV] = self.alt
        tops = []
        for i, token in enumerate(ids):
            top = {token: -0.05, **{token + d: -3.0 - d for d in (1, 2, 3, 4) if token + d != self.alt}}
            if i == K_DIV:
                other = self.plain[K_DIV] if speculating else self.alt
                top[other] = {
                    "spec-far": -6.0,
                    "nan": math.nan,
                    "minus-inf": -math.inf,
                    "jitter": -0.3 + (1e-5 if turn % 2 == 0 else 0.0),
                }.get(mode, -0.05)
                if mode == "empty-alts":
                    top = {}
            tops.append(top)
        text = self.tok.decode(ids)
        choice: dict[str, Any] = {
            "index": 0,
            "text": "The Xnswer is 56." if mode == "lying-ids" else text,
            "finish_reason": "stop",
            "token_ids": ids,
            "logprobs": {
                "tokens": [f"token_id:{t}" for t in ids],
                "token_logprobs": [-0.05] * len(ids),
                "top_logprobs": [{f"token_id:{t}": v for t, v in top.items()} for top in tops],
                "text_offset": list(range(len(ids))),
            },
        }
        answer: dict[str, Any] = {
            "id": "cmpl-x",
            "object": "text_completion",
            "model": "fake",
            "choices": [choice],
            "usage": {"prompt_tokens": 3, "completion_tokens": len(ids)},
        }
        if mode == "choices":
            answer["choices"] = [{**choice, "index": 1, "text": "another answer", "token_ids": ids[:2]}, choice]
        if mode == "acceptance":
            answer["metrics"] = {
                "speculative_decoding": {
                    "num_spec_steps": 1,
                    "num_draft_tokens": 3,
                    "num_accepted_draft_tokens": 50,
                    "num_spec_tokens": 3,
                }
            }
        return answer


def _endpoint_run(
    ctx: ScenarioContext, server: Misbehaving, spec_mode: str, base_mode: str | None, out: Path, *extra: str
) -> tuple[int | None, dict | None, str, str]:
    """`run --endpoint SERVER/spec_mode [--baseline-endpoint SERVER/base_mode] --spec eagle3 --draft-len 3`: (exit
    status, the summary it printed as JSON or None, stdout, stderr)."""
    args = [
        "run",
        "--endpoint",
        f"{server.url}/{spec_mode}",
        "--spec",
        "eagle3",
        "--draft-len",
        "3",
        *SMOKE_ENDPOINT,
        "--out",
        str(out),
        *extra,
    ]
    if base_mode is not None:
        args += ["--baseline-endpoint", f"{server.url}/{base_mode}"]
    code, stdout, err = _cli(ctx, *args)
    try:
        summary = json.loads(stdout[stdout.index("{") :]) if "{" in stdout else None
    except ValueError:
        summary = None
    return code, summary, stdout, err


def _lossless(summary: dict | None) -> dict:
    task = ((summary or {}).get("tasks") or {}).get("gsm8k_smoke") or {}
    return task.get("lossless") or {}


def _no_traceback(code: int | None, err: str) -> list[str]:
    problems = ["traceback"] if "Traceback" in err else []
    return problems + ([f"exit {code}"] if code not in (0, 1, 2) else [])


Result = tuple[str, "int | None", list[str], str]  # (case name, exit status, problems, tail of stderr)


def _not_pass(name: str, spec: str, base: str):
    """A case: `run --endpoint /spec --baseline-endpoint /base` must print a summary whose lossless verdict is not
    PASS (the evidence is not there), without a traceback."""

    def case(ctx: ScenarioContext, server: Misbehaving) -> Result:
        code, summary, _, err = _endpoint_run(ctx, server, spec, base, ctx.root / name)
        gate = _lossless(summary)
        problems = _no_traceback(code, err) + ([] if summary else ["no summary printed"])
        if gate.get("verdict") == "PASS":
            problems.append(f"lossless PASS: {gate.get('reason', '')[:160]}")
        return name, code, problems, err

    return case


def _lying_ids(ctx: ScenarioContext, server: Misbehaving) -> Result:
    """Item 2: the plain answer's ids with another text: failed requests (exit 1), never "identical"."""
    code, summary, _, err = _endpoint_run(ctx, server, "lying-ids", "plain", ctx.root / "lying")
    problems = _no_traceback(code, err)
    problems += ["lossless PASS on ids that are not the text"] if _lossless(summary).get("verdict") == "PASS" else []
    problems += [] if code == 1 else [f"exit {code}, expected 1 (the lying answers are failed requests)"]
    return "hard-endpoint-lying-token-ids", code, problems, err


def _same_server(ctx: ScenarioContext, server: Misbehaving) -> Result:
    """Item 4: a server as its own baseline: refused in one line."""
    code, _, _, err = _endpoint_run(ctx, server, "spec", "spec", ctx.root / "same")
    return "hard-endpoint-same-server-baseline", code, _one_error_line(code, err, "same server"), err


def _impossible_acceptance(ctx: ScenarioContext, server: Misbehaving) -> Result:
    """Item 5: 50 accepted of 3 drafted: no acceptance length, nothing populated."""
    refs = ctx.root / "acceptance-refs.yaml"
    code, summary, _, err = _endpoint_run(
        ctx,
        server,
        "acceptance",
        "plain",
        ctx.root / "acceptance",
        "--populate-acceptance",
        "--acceptance-refs",
        str(refs),
    )
    task = ((summary or {}).get("tasks") or {}).get("gsm8k_smoke") or {}
    al = (task.get("acceptance") or {}).get("acceptance_length")
    problems = _no_traceback(code, err) + ([f"acceptance length {al}"] if al is not None and al > 4 else [])
    problems += ["a reference was written"] if refs.exists() and "ref_al" in refs.read_text() else []
    return "hard-endpoint-impossible-acceptance", code, problems, err


def _two_choices(ctx: ScenarioContext, server: Misbehaving) -> Result:
    """Item 8: two choices for n = 1, out of order: each a failed request, never mixed."""
    code, summary, _, err = _endpoint_run(ctx, server, "choices", "plain", ctx.root / "choices")
    failed = ((summary or {}).get("tasks") or {}).get("gsm8k_smoke", {}).get("num_failed_requests")
    problems = _no_traceback(code, err) + ([] if failed == 4 else [f"{failed} failed requests, expected 4"])
    return "hard-endpoint-two-choices", code, problems, err


def _reason_lacks(name: str, spec: str, base: str, words: str, *, needs: str = ""):
    """Item 9: the lossless reason of `run --endpoint /spec --baseline-endpoint /base` must not say `words` (and
    must say `needs`)."""

    def case(ctx: ScenarioContext, server: Misbehaving) -> Result:
        code, summary, _, err = _endpoint_run(ctx, server, spec, base, ctx.root / name)
        reason = _lossless(summary).get("reason", "")
        problems = _no_traceback(code, err) + ([f"reason {reason[:160]!r}"] if words in reason else [])
        problems += [f"no {needs!r} in {reason[:160]!r}"] if needs not in reason else []
        return name, code, problems, err

    return case


def _refused(name: str, words: str, base: str | None, *extra: str, out: str = ""):
    """Items 6, 7, 9: an option an endpoint run cannot take is one error line holding `words`."""

    def case(ctx: ScenarioContext, server: Misbehaving) -> Result:
        fill = {"{control}": lambda: _control_of(ctx.root / "hard-endpoint-nan-logprobs"), "{local}": _local_run}
        args = [fill[a](ctx) if a == "{local}" else fill[a]() if a in fill else a for a in extra]
        code, _, _, err = _endpoint_run(ctx, server, "spec", base, ctx.root / (out or name), *args)
        return name, code, _one_error_line(code, err, words), err

    return case


def _control_of(store: Path) -> str:
    """The noise-floor control an earlier endpoint run recorded in `store`."""
    found = [p.name for p in store.glob("2*") if "noise_control" in (p / "manifest.json").read_text()]
    return found[0] if found else "no-control-recorded"


_LOCAL_RUN_LOCK = threading.Lock()


def _local_run(ctx: ScenarioContext) -> str:
    """A plain run of our engine (tiny) in the store the endpoint run uses (ctx.root / "local"), once: its run id."""
    done = ctx.root / "local" / "run-id"
    with _LOCAL_RUN_LOCK:  # the endpoint cases run two at a time
        if not done.exists():
            code, out, err = _cli(
                ctx,
                "run",
                "--model",
                "tiny",
                "--device-memory",
                "256MiB",
                "--tasks",
                "gsm8k_smoke",
                "--limit",
                "4",
                "--no-reference",
                "--max-output-len",
                "16",
                "--out",
                str(ctx.root / "local"),
                "--json",
            )
            run_id = json.loads(out[out.index("{") :]).get("run_id") if code == 0 and "{" in out else None
            _write(done, str(run_id))
    return done.read_text()


ENDPOINT_CASES = [
    _not_pass("hard-endpoint-nan-logprobs", "spec", "nan"),  # item 1 (NaN at every divergence: no crash either)
    _lying_ids,  # item 2
    _not_pass("hard-endpoint-empty-alternatives", "spec-far", "empty-alts"),  # item 3
    _same_server,  # item 4
    _impossible_acceptance,  # item 5
    _two_choices,  # item 8
    _reason_lacks("hard-endpoint-failed-requests-reason", "refuse", "plain", "differ"),  # item 9
    _reason_lacks("hard-endpoint-infinite-margin-reason", "spec", "minus-inf", "inf nats"),
    _reason_lacks("hard-endpoint-tiny-bound-printed", "spec-far", "jitter", "0.0000", needs="noise bound"),
    _refused("hard-endpoint-baseline-paired", "only our engine", None, "--baseline", "paired"),
    _refused("hard-endpoint-gpus", "--gpus 2", "plain", "--gpus", "2"),
    _refused("hard-endpoint-baseline-of-another-engine", "our engine", None, "--baseline", "{local}", out="local"),
    _refused(
        "hard-endpoint-baseline-is-the-control",
        "noise-floor control",
        None,
        "--baseline",
        "{control}",
        out="hard-endpoint-nan-logprobs",
    ),  # item 7: the control item 1's run recorded
]
ENDPOINT_NAMES = (
    "hard-endpoint-nan-logprobs",
    "hard-endpoint-lying-token-ids",
    "hard-endpoint-empty-alternatives",
    "hard-endpoint-same-server-baseline",
    "hard-endpoint-impossible-acceptance",
    "hard-endpoint-two-choices",
    "hard-endpoint-failed-requests-reason",
    "hard-endpoint-infinite-margin-reason",
    "hard-endpoint-tiny-bound-printed",
    "hard-endpoint-baseline-paired",
    "hard-endpoint-gpus",
    "hard-endpoint-baseline-of-another-engine",
    "hard-endpoint-baseline-is-the-control",
)


def _endpoint_scenarios(ctx: ScenarioContext) -> list[Result]:
    """Issue 38's items 1-9 against one Misbehaving server: item 1 first (item 7 refuses the control its run
    recorded), then the others two at a time (each is a `python -m` process that mostly starts up; the server's
    answers depend only on the mode and, for "jitter", which only one case uses, on the turn). A case that breaks
    the probe itself is reported as that case's problem, and the others still run."""
    from concurrent.futures import ThreadPoolExecutor

    server = Misbehaving()

    def one(name_case) -> Result:
        name, case = name_case
        try:
            got_name, code, problems, err = case(ctx, server)
            assert got_name == name, (got_name, name)
        except Exception as exc:  # noqa: BLE001 - the probe reports, it does not stop
            code, problems, err = None, [f"the probe failed: {type(exc).__name__}: {exc}"], ""
        return name, code, problems, err[-400:]

    cases = list(zip(ENDPOINT_NAMES, ENDPOINT_CASES, strict=True))
    try:
        results = [one(cases[0])]
        with ThreadPoolExecutor(2) as pool:
            results += list(pool.map(one, cases[1:]))
    finally:
        server.close()
    return results


def _serve_logprob_texts(ctx: ScenarioContext) -> list[tuple[str, int | None, list[str], str]]:
    """`serve --model tiny`: text_offset never past the text, chat bytes the tokens' own (the tiny model's greedy
    answers hold special and byte-fallback tokens)."""
    import re
    import subprocess

    import httpx

    proc = subprocess.Popen(
        [*ctx.cli, "serve", *FAST, "--port", "0", "--log-level", "warning"],
        stderr=subprocess.PIPE,
        text=True,
        env=ctx.env,
    )
    url = None
    for line in proc.stderr:
        if m := re.search(r"listening on (http://\S+)", line):
            url = m.group(1)
            break
    names = ("hard-serve-text-offset-inside-text", "hard-serve-chat-bytes-own")
    if url is None:
        proc.kill()
        return [(n, proc.wait(), ["the server did not start"], "") for n in names]
    try:
        body = {
            "prompt": "The capital of France is",
            "max_tokens": 48,
            "temperature": 0,
            "logprobs": 1,
            "ignore_eos": True,
        }
        choice = httpx.post(url + "/v1/completions", json=body, timeout=ctx.timeout).json()["choices"][0]
        offsets = choice["logprobs"]["text_offset"]
        late = [o for o in offsets if o > len(choice["text"])]
        results = [(names[0], 200, [f"offsets {late[:3]} past a text of {len(choice['text'])}"] if late else [], "")]
        chat = {
            "messages": [{"role": "user", "content": "Caf\u00e9 \u2603"}],
            "max_tokens": 48,
            "temperature": 0,
            "logprobs": True,
            "ignore_eos": True,
        }
        content = httpx.post(url + "/v1/chat/completions", json=chat, timeout=ctx.timeout).json()
        entries = content["choices"][0]["logprobs"]["content"]
        replaced = [e for e in entries if e["token"] == "\ufffd" and e["bytes"] == list("\ufffd".encode())]
        checked = sum(e["token"] == "\ufffd" for e in entries)
        problems = [f"{len(replaced)} of {checked} byte tokens carry U+FFFD's bytes"] if replaced else []
        problems += [] if checked else ["no byte token in the answer: nothing checked"]
        results.append((names[1], 200, problems, ""))
    finally:
        proc.terminate()
        proc.wait(60)
    return results


SCENARIOS = [
    (ENDPOINT_NAMES, _endpoint_scenarios),
    (("hard-serve-text-offset-inside-text", "hard-serve-chat-bytes-own"), _serve_logprob_texts),
    (("hard-frames-not-a-run-or-store",), _frames_scenario),
]
