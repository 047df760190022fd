"""The hostile inputs of scripts/probe.py: the cases (command lines and what must come out of them), the fixture
files they read (written into a temporary folder), and the HTTP server group's requests. No GPQA text: every
data file is synthetic."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ERROR = "specdec-eval: error:"
# Case name -> why it is expected to fail for now (its fix is planned: "known, fixed in phase 2"). probe.py prints
# such a case as "known" and does not fail on it; once it is clean, the probe says so and the entry goes.
KNOWN: dict[str, str] = {}
FAST = ["--model", "tiny", "--device-memory", "256MiB", "--device", "cpu"]
SMOKE = [*FAST, "--tasks", "gsm8k_smoke", "--no-reference", "--limit", "1", "--max-output-len", "4"]
TEST_ID = "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]"


@dataclass
class Case:
    """One command line. `args` may name fixtures as {name}; `expect` is the exit status; `message` a substring
    the error line must hold; `multiline`: lines before the error line are allowed (help text, a notice).

    For a command that must succeed at something or leave a record behind (issue 27): `setup(scratch)` writes
    files into the case's folder first; `check(scratch, stdout, stderr, fixtures)` returns the problems it finds
    afterwards; `keep`: files may stay in the folder (the check looks at them); `env`: environment variables of
    the case (its values may name fixtures as {name} too); `signal_when`: SIGTERM is sent to the case once its
    stderr holds this text."""

    name: str
    args: list[str]
    expect: int = 2
    message: str = ""
    stdin: bytes = b""
    multiline: bool = False
    prefix: str = ERROR  # what the last stderr line starts with
    setup: Callable[[Path], None] | None = None
    check: Callable[[Path, str, str, dict[str, str]], list[str]] | None = None
    keep: bool = False
    env: dict[str, str] = field(default_factory=dict)
    signal_when: str | None = None


def cli_cases() -> list[Case]:
    """The hostile inputs: usage errors, out-of-range values, impossible faults, broken files, bad destinations."""
    run = ["run", *SMOKE, "--out", "runs"]
    gen = ["generate", "{prompts_ok}", *FAST, "-n", "2"]
    # fmt: off
    return [
        # click / Typer usage errors
        Case("no-command", [], multiline=True, message="missing command"),
        Case("unknown-command", ["frobnicate"], message="No such command"),
        Case("engine-without-subcommand", ["engine"], multiline=True, message="missing command"),
        Case("run-limit-not-a-number", [*run, "--limit", "abc"], message="--limit"),
        Case("run-unknown-option", [*run, "--bogus"], message="No such option: --bogus"),
        Case("waive-without-bug", ["waive", TEST_ID, "-f", "{waives}"], message="--bug"),
        Case("report-without-run", ["report"], message="Missing argument"),
        Case("run-tp-without-gpus", [*run, "--tp", "2"], message="--tp > 1 needs --gpus"),
        # ranges and choices, refused where declared
        Case("run-limit-zero", [*run, "--limit", "0"], message="--limit"),
        Case("run-limit-negative", [*run, "--limit", "-1"], message="--limit"),
        Case("run-fewshot-negative", [*run, "--num-fewshot", "-1"], message="--num-fewshot"),
        Case("run-fewshot-1000", [*run, "--num-fewshot", "1000"], message="--num-fewshot"),
        Case("run-fewshot-beyond-train", [*run, "--num-fewshot", "6"], message="only 5 examples"),
        Case("run-gpus-zero", [*run, "--gpus", "0"], message="--gpus"),
        Case("run-gpus-negative", [*run, "--gpus", "-2"], message="--gpus"),
        Case("run-max-output-len-zero", [*run, "--max-output-len", "0"], message="--max-output-len"),
        Case("run-kv-cache-unknown", [*run, "--kv-cache", "v3"], message="'v3' is not one of"),
        Case("run-spec-unknown", [*run, "--spec", "medusa"], message="'medusa' is not one of"),
        Case("run-draft-len-zero", [*run, "--spec", "eagle3", "--draft-len", "0"], message="--draft-len"),
        Case("run-draft-len-17", [*run, "--spec", "eagle3", "--draft-len", "17"], message="--draft-len"),
        Case("run-dtype-unknown", [*run, "--dtype", "int4"], message="'int4' is not one of"),
        Case("run-warmup-unknown", [*run, "--warmup", "maybe"], message="'maybe' is not one of"),
        Case("run-batch-zero", [*run, "--max-batch-size", "0"], message="--max-batch-size"),
        Case("run-memory-unreadable", [*run, "--device-memory", "lots"], message="cannot read memory size"),
        Case("run-memory-zero", [*run, "--device-memory", "0"], message="must be positive"),
        Case("run-seed-negative", [*run, "--seed", "-1"], message="--seed"),
        Case("run-task-unknown", ["run", *FAST, "--tasks", "nope", "--out", "runs"], message="unknown task 'nope'"),
        Case("run-rdzv-backend-unknown", [*run, "--gpus", "2", "--rdzv-backend", "zmq"], message="--rdzv-backend"),
        Case("run-baseline-endpoint-alone", [*run, "--baseline-endpoint", "http://127.0.0.1:9"],
             message="needs --endpoint"),
        Case("generate-temperature-negative", [*gen, "--temperature", "-1"], message="--temperature"),
        Case("generate-top-p-zero", [*gen, "--top-p", "0"], message="--top-p"),
        Case("generate-top-p-above-one", [*gen, "--top-p", "1.5"], message="--top-p"),
        Case("generate-capture-layers", [*gen, "--spec", "eagle3", "--capture-layers", "1,x,3"],
             message="--capture-layers"),
        Case("engine-info-tp-3", ["engine", "info", *FAST, "--tp", "3"], message="does not divide"),
        Case("selftest-mode-unknown", ["selftest", "--mode", "nope"], message="--mode"),
        Case("selftest-no-prompts", ["selftest", "--num-prompts", "0"], message="--num-prompts"),
        Case("draft-train-no-prompts", ["draft", "train", "--num-prompts", "0"], message="--num-prompts"),
        Case("compare-alpha-2", ["compare", "a", "b", "--out", "{store}", "--alpha", "2"], message="--alpha"),
        Case("decide-k-zero", ["decide", TEST_ID, "--out", "{store}", "--k", "0"], message="--k"),
        # faults that could never fire
        Case("inject-unreadable", [*run, "--inject", "bogus"], message="cannot read --inject"),
        Case("inject-draft-step-without-spec", [*run, "--inject", "draft_step:1"], message="add --spec"),
        Case("inject-draft-step-past-k", [*run, "--spec", "eagle3", "--inject", "draft_step:99"],
             message="draft steps are 0..2"),
        Case("inject-emit-rejected-without-spec", [*run, "--inject", "emit_rejected_draft"], message="add --spec"),
        Case("inject-restore-without-spec", [*run, "--inject", "restore"], message="add --spec"),
        Case("inject-warmup-oom-warmup-off", [*run, "--inject", "warmup_oom", "--warmup", "off"],
             message="warmup does not run"),
        Case("inject-warmup-oom-auto-on-cpu", [*run, "--inject", "warmup_oom"], message="warmup does not run"),
        Case("inject-with-endpoint", [*run, "--endpoint", "http://127.0.0.1:9", "--inject", "target_forward"],
             message="never fire in an endpoint run"),
        # data files with the wrong schema
        Case("data-dir-missing", [*run[:-2], "--tasks", "gsm8k", "--data-dir", "{missing}", "--out", "runs"],
             message="is not a folder"),
        *[
            Case(f"gsm8k-{kind}", ["run", *FAST, "--tasks", "gsm8k", "--limit", "1", "--no-reference",
                                   "--data-dir", f"{{gsm8k_{kind}}}", "--out", "runs"], message=message)
            for kind, message in (("wrong-columns", "test.jsonl:1: missing 'answer'"),
                                  ("broken-json", "test.jsonl:2:"), ("empty", "test.jsonl: no rows"),
                                  ("not-utf8", "test.jsonl:1:15: not valid UTF-8"),
                                  ("answer-not-text", "'answer' must be a string"),
                                  ("json-array-wrong", "item 1: missing 'question'"),
                                  ("csv-wrong-columns", "train.csv:1: missing columns 'answer'"))
        ],
        *[
            Case(f"gpqa-{kind}", ["run", *FAST, "--tasks", "gpqa_diamond", "--limit", "1", "--no-reference",
                                  "--data-dir", f"{{gpqa_{kind}}}", "--out", "runs"], message=message)
            for kind, message in (("no-columns", "missing columns 'Question'"), ("no-rows", "no rows"),
                                  ("empty-cell", "no value in column 'Correct Answer'"),
                                  ("bad-zip", "not the official GPQA zip"))
        ],
        # input files of generate
        Case("prompts-not-utf8", ["generate", "{prompts_bad_utf8}", *FAST], message="prompts.txt:2:4: not valid UTF-8"),
        Case("prompts-stdin-not-utf8", ["generate", "-", *FAST], stdin=b"ok\n\xff\xfe\n", message="stdin:2:1:"),
        Case("prompts-bad-json", ["generate", "{prompts_json}", *FAST], message="prompts.jsonl:2: not valid JSON"),
        Case("prompts-bad-messages", ["generate", "{prompts_messages}", *FAST], message="'messages' must be"),
        Case("prompts-empty", ["generate", "{prompts_empty}", *FAST], message="no prompts"),
        Case("prompts-folder", ["generate", "{store}", *FAST], message="is a folder"),
        # destinations that cannot be written
        Case("run-out-is-a-file", [*run[:-2], "--out", "{a_file}"], message="is a file"),
        Case("run-out-under-a-file", [*run[:-2], "--out", "{a_file}/runs"], message="is a file"),
        Case("generate-events-is-a-folder", [*gen, "--events", "{store}"], message="is a folder"),
        Case("generate-events-missing-folder", [*gen, "--events", "{missing}/e.jsonl"], message="does not exist"),
        Case("report-out-is-a-folder", ["report", "x", "--root", "{store}", "-o", "{store}"],
             message="--out"),
        Case("runs-out-is-a-file", ["runs", "--out", "{a_file}"], message="--out"),
        Case("waive-file-is-a-folder", ["waive", TEST_ID, "--bug", "b", "-f", "{store}"], message="-f"),
        Case("waive-bug-with-newline", ["waive", TEST_ID, "--bug", "b\nother/t.py::t SKIP", "-f", "{waives}"],
             message="U+000A"),
        Case("waive-marker-unknown", ["waive", TEST_ID, "--bug", "b", "--marker", "NOPE", "-f", "{waives}"],
             message="--marker"),
        # draft heads: checked before anything runs (a spec-dec run's baseline would run first)
        *[
            Case(f"head-{kind}", [*run, "--spec", "eagle3", "--draft-model", f"{{head_{kind}}}"], message=message)
            for kind, message in (("missing", "draft model folder not found"), ("no-config", "has no config.json"),
                                  ("broken-config", "config.json:1:"), ("wrong-tensor", "not part of an Eagle3 head"),
                                  ("missing-tensors", "lacks tensors"), ("corrupt", "not a readable safetensors"),
                                  ("pickle", "weights_only"))
        ],
        Case("model-not-found", [*gen[:2], "--model", "{missing}"], message="model path not found"),
        Case("model-not-gguf", ["generate", "{prompts_ok}", "--model", "{a_file}"], message="not a .gguf file"),
        # documented statuses other than 2
        Case("unwaive-not-waived", ["unwaive", TEST_ID, "-f", "{waives}"], expect=1, prefix="specdec-eval: ",
             message="is not waived"),
        # --- issue 27 (trust): scripts/probe_cases_trust.py ---
        *_trust_cases(),
        # --- issue 38 (hardening): scripts/probe_cases_hardening.py ---
        *_hardening_cases(),
    ]
    # fmt: on


def _trust_cases() -> list[Case]:
    from probe_cases_trust import trust_cases  # it imports this module

    return trust_cases()


def _hardening_cases() -> list[Case]:
    from probe_cases_hardening import hardening_cases  # it imports this module

    return hardening_cases()


# --- fixtures -------------------------------------------------------------------------------------------------------


def _write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _safetensors(tensors: dict[str, tuple[int, ...]]) -> bytes:
    """A float32 safetensors file of zeros (the format: header length, JSON header, data), without torch."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = 4
        for n in shape:
            size *= n
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def _gsm8k(folder: Path, test: str | bytes, train: str | bytes | None = None, suffix: str = ".jsonl") -> str:
    good = json.dumps({"question": "1+1?", "answer": "2\n#### 2"}) + "\n"
    _write(folder / "gsm8k" / f"train{suffix}", train if train is not None else good * 3)
    _write(folder / "gsm8k" / f"test{suffix}", test)
    return str(folder)


def _gpqa_csv(folder: Path, text: str) -> str:
    _write(folder / "gpqa" / "gpqa_diamond.csv", text)
    return str(folder)


def _evil_pickle(marker: Path) -> bytes:
    """A pickle whose loading would create `marker` (opening it for writing): weights_only must refuse it."""
    import pickle

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    return pickle.dumps({"fc.weight": Evil()})


def make_fixtures(root: Path) -> dict[str, str]:
    """Every file the cases read, under root/fixtures; names for the {placeholders} of Case.args."""
    f = root / "fixtures"
    q = "What is 1+1?"
    header = "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"
    head_cfg = _tiny_head_config()
    fx = {
        "missing": str(f / "does-not-exist"),
        "a_file": str(_write(f / "a-file.txt", "not a folder\n")),
        "store": str((f / "store").resolve()),
        "waives": str(_write(f / "waives.txt", "a/test.py::test_a SKIP (https://nvbugs/1)\n")),
        "prompts_ok": str(_write(f / "prompts-ok.txt", "The capital of France is\n")),
        "prompts_bad_utf8": str(_write(f / "prompts.txt", b"fine prompt\nbad\xff\xfe bytes\n")),
        "prompts_json": str(_write(f / "prompts.jsonl", '{"prompt": "ok"}\n{"prompt": broken\n')),
        "prompts_messages": str(_write(f / "messages.jsonl", '{"messages": "not a list"}\n')),
        "prompts_empty": str(_write(f / "empty.txt", "\n\n")),
        "gsm8k_wrong-columns": _gsm8k(f / "g1", json.dumps({"question": q, "solution": "2"}) + "\n"),
        "gsm8k_broken-json": _gsm8k(f / "g2", json.dumps({"question": q, "answer": "2"}) + '\n{"question": \n'),
        "gsm8k_empty": _gsm8k(f / "g3", ""),
        "gsm8k_not-utf8": _gsm8k(f / "g4", b'{"question": "\xff", "answer": "2"}\n'),
        "gsm8k_answer-not-text": _gsm8k(f / "g5", json.dumps({"question": q, "answer": 2}) + "\n"),
        "gsm8k_json-array-wrong": _gsm8k(f / "g6", json.dumps([{"question": q, "answer": "2"}, {"answer": "3"}])),
        "gsm8k_csv-wrong-columns": _gsm8k(f / "g7", "question,answer\nq,2\n", "question,solution\nq,2\n", ".csv"),
        "gpqa_no-columns": _gpqa_csv(f / "p1", "Q,A\nx,y\n"),
        "gpqa_no-rows": _gpqa_csv(f / "p2", header),
        "gpqa_empty-cell": _gpqa_csv(f / "p3", header + "Which?,,b,c,d\n"),
        "gpqa_bad-zip": str(_write(f / "p4" / "gpqa" / "dataset.zip", b"PK not really a zip").parent.parent),
        "head_missing": str(f / "no-head"),
        "head_no-config": str(_write(f / "h1" / "model.safetensors", _safetensors({})).parent),
        "head_broken-config": str(_write(f / "h2" / "config.json", "{not json").parent),
        "head_wrong-tensor": _head(f / "h3", head_cfg, _safetensors({"bogus.weight": (2, 2)})),
        "head_missing-tensors": _head(f / "h4", head_cfg, _safetensors({"fc.weight": (64, 192)})),
        "head_corrupt": _head(f / "h5", head_cfg, b"\x10\x00\x00\x00\x00\x00\x00\x00{broken"),
        "head_pickle": _head(f / "h6", head_cfg, _evil_pickle(root / "PICKLE-RAN"), "pytorch_model.bin"),
    }
    Path(fx["store"]).mkdir(parents=True, exist_ok=True)
    from probe_cases_trust import trust_fixtures  # --- issue 27 (trust) ---

    fx.update(trust_fixtures(f / "trust"))
    from probe_cases_hardening import hardening_fixtures  # --- issue 38 (hardening) ---

    fx.update(hardening_fixtures(f / "hardening"))
    return fx


def _head(folder: Path, config: dict, weights: bytes, name: str = "model.safetensors") -> str:
    _write(folder / "config.json", json.dumps(config))
    _write(folder / name, weights)
    return str(folder)


def _tiny_head_config() -> dict:
    """An Eagle3 head config.json shaped for the tiny preset (so only the tensors are wrong)."""
    from specdec_eval.workers.loading.presets import tiny_config

    cfg = tiny_config().to_hf_dict()
    cfg.update(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1)
    return cfg


# (name, method, path, body or raw bytes, headers, expected status). After each one the server must still answer
# GET /health with 200 and a good completion. Sent to `specdec-eval serve --model tiny --api-key SERVER_KEY`; every
# case carries the right key unless it names its own Authorization header.
SERVER_KEY = "probe-key"
SERVER_CASES: list[tuple[str, str, str, object, dict[str, str], tuple[int, ...]]] = [
    ("malformed-json", "POST", "/v1/completions", b"{not json", {}, (400,)),
    ("json-not-an-object", "POST", "/v1/completions", ["hi"], {}, (400,)),
    ("no-prompt", "POST", "/v1/completions", {"max_tokens": 2}, {}, (400,)),
    ("unknown-model", "POST", "/v1/completions", {"model": "nope", "prompt": "hi", "max_tokens": 2}, {}, (404,)),
    ("max-tokens-past-context", "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 10**6}, {}, (400,)),
    ("negative-temperature", "POST", "/v1/completions", {"prompt": "hi", "temperature": -1}, {}, (400,)),
    ("top-p-above-one", "POST", "/v1/completions", {"prompt": "hi", "top_p": 1.5}, {}, (400,)),
    ("n-two", "POST", "/v1/completions", {"prompt": "hi", "n": 2}, {}, (400,)),
    ("token-id-outside-vocab", "POST", "/v1/completions", {"prompt": [1, 99999]}, {}, (400,)),
    ("wrong-api-key", "POST", "/v1/completions", {"prompt": "hi"}, {"Authorization": "Bearer wrong"}, (401,)),
    ("no-api-key", "POST", "/v1/completions", {"prompt": "hi"}, {"Authorization": ""}, (401,)),
    ("one-megabyte-prompt", "POST", "/v1/completions", {"prompt": "x" * 2**20, "max_tokens": 1}, {}, (413,)),
    ("chat-no-messages", "POST", "/v1/chat/completions", {"messages": []}, {}, (400,)),
    ("chat-message-without-role", "POST", "/v1/chat/completions", {"messages": [{"content": "x"}]}, {}, (400,)),
    ("unknown-route", "GET", "/v1/nowhere", None, {}, (404,)),
    ("get-on-a-post-route", "GET", "/v1/completions", None, {}, (405,)),
]


# ==================================================================================================================
# Issue 27: the server and the endpoint client (helper t27b). Requests for the server group above, and scenarios
# that need a process, a stub server or a signal of their own (scripts/probe.py runs SERVER_SCENARIOS after the
# server group). Every question below is invented: a stand-in for a sealed GPQA question.
# ==================================================================================================================

SERVER_CASES.extend(
    [
        ("temperature-nan", "POST", "/v1/completions", b'{"prompt": "hi", "temperature": NaN}', {}, (400,)),
        ("temperature-1e400", "POST", "/v1/completions", b'{"prompt": "hi", "temperature": 1e400}', {}, (400,)),
        ("prompt-lone-surrogate", "POST", "/v1/completions", b'{"prompt": "a \\ud800 b"}', {}, (400,)),
        (
            "chat-lone-surrogate",
            "POST",
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "\\udc00"}]}',
            {},
            (400,),
        ),
        (
            "json-nested-5000-deep",
            "POST",
            "/v1/completions",
            b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            {},
            (400,),
        ),
        (
            "more-prompts-than-max-queue",
            "POST",
            "/v1/completions",
            {"prompt": ["a"] * 1025, "max_tokens": 1},
            {},
            (400,),
        ),
    ]
)


@dataclass
class ScenarioContext:
    cli: list[str]  # how to start the command line
    env: dict[str, str]
    root: Path  # a temporary folder for the scenarios' files
    timeout: float


# (case name, exit status or None, problems, tail of what it printed)
ScenarioResult = tuple[str, "int | None", list[str], str]

SEALED = [f"In the invented Quillish tongue, which glyph carries tone {i} in the northern dialect?" for i in range(5)]


def _cli(ctx: ScenarioContext, *args: str) -> tuple[int | None, str, str]:
    import subprocess

    try:
        p = subprocess.run(
            [*ctx.cli, *args], capture_output=True, text=True, timeout=ctx.timeout, cwd=ctx.root, env=ctx.env
        )
    except subprocess.TimeoutExpired as e:
        return None, str(e.stdout or ""), f"timed out after {ctx.timeout:.0f} s"
    return p.returncode, p.stdout, p.stderr


def _one_error_line(code: int | None, err: str, words: str, absent: tuple[str, ...] = ()) -> list[str]:
    lines = [line for line in err.splitlines() if line.strip()]
    problems = [] if code == 2 else [f"exit {code}, expected 2"]
    if "Traceback" in err:
        problems.append("traceback")
    if len(lines) != 1 or not lines[0].startswith(ERROR):
        problems.append(f"{len(lines)} lines on stderr, expected one error line")
    elif words not in lines[0]:
        problems.append(f"error line lacks {words!r}")
    problems += [f"error line holds {a!r}" for a in absent if a in err]
    return problems


def _serve_port_in_use(ctx: ScenarioContext) -> list[ScenarioResult]:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = str(busy.getsockname()[1])
        code, _, err = _cli(ctx, "serve", *FAST, "--port", port)
    return [("serve-port-in-use", code, _one_error_line(code, err, "the port is in use"), err[-400:])]


def _serve_api_key_not_ascii(ctx: ScenarioContext) -> list[ScenarioResult]:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:  # a port in use: a key accepted would not serve forever
        port = str(busy.getsockname()[1])
        code, _, err = _cli(ctx, "serve", *FAST, "--port", port, "--api-key", "cl\u00e9")
    return [
        ("serve-api-key-not-ascii", code, _one_error_line(code, err, "--api-key must be printable ASCII"), err[-400:])
    ]


class _Stub:
    """An OpenAI-compatible stub on 127.0.0.1 whose behaviour is the URL's first path segment: /MODE/v1/..."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        def answer(mode: str, body: dict) -> tuple[int, object]:
            """mode "broken": question i gets a 400 (i = 0) or a 500 (1) repeating its input, finish_reason
            "aborted" (2) or "error" (3), or a number for its text (4)."""
            prompt = str(body.get("prompt"))
            i = next((i for i in range(len(SEALED)) if f"tone {i} " in prompt), 0)
            if i < 2:
                return (400, 500)[i], {"error": {"message": f"cannot take {prompt}"}}
            choice = {
                "index": 0,
                "text": 5 if i == 4 else "The answer is (A)",
                "finish_reason": {2: "aborted", 3: "error"}.get(i, "stop"),
            }
            return 200, {"choices": [choice]}

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: object) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):  # noqa: N802 - the stdlib's name
                mode = self.path.split("/")[1]
                status = {"refuse": 401, "unlisted": 500}.get(mode, 200)
                self._send(status, {"data": [{"id": "m"}]} if status == 200 else {"error": {"message": "no"}})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                self._send(*answer(self.path.split("/")[1], body))

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _gpqa_folder(root: Path) -> Path:
    rows = "".join(f'"{q}",gx,hx,jx,kx\n' for q in SEALED)
    _write(
        root / "gpqa-data" / "gpqa" / "gpqa_diamond.csv",
        "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n" + rows,
    )
    return root / "gpqa-data"


def _endpoint_broken_answers(ctx: ScenarioContext) -> list[ScenarioResult]:
    """`run --endpoint` on five sealed questions against a stub that fails each one differently (_Stub "broken"):
    the run finishes and FAILs with exit 1, every failure is recorded with its reason, and no question reaches the
    run's files, stdout or stderr."""
    stub = _Stub()
    out = ctx.root / "runs"
    try:
        code, stdout, err = _cli(
            ctx,
            "run",
            "--endpoint",
            f"{stub.url}/broken",
            "--model",
            "tiny",
            "--tasks",
            "gpqa_diamond",
            "--data-dir",
            str(_gpqa_folder(ctx.root)),
            "--no-reference",
            "--request-retries",
            "0",
            "--out",
            str(out),
        )
    finally:
        stub.close()
    common = [] if code == 1 else [f"exit {code}, expected 1 (a failed request fails the run)"]
    common += ["traceback"] if "Traceback" in err else []
    runs = sorted(out.glob("2*"))
    reasons: list[str] = []
    if len(runs) != 1 or not (runs[0] / "summary.json").is_file():
        common.append("no finished run folder (summary.json)")
    else:
        events = [json.loads(line) for line in (runs[0] / "events.jsonl").read_text().splitlines() if line.strip()]
        reasons = [e["reason"] for e in events if e["type"] == "request_failed"]
        if f"{len(SEALED)} of {len(SEALED)} requests FAILED" not in stdout:
            common.append(f"the report does not say {len(SEALED)} of {len(SEALED)} requests FAILED")
    results = []
    for name, reason, count in (
        ("endpoint-gpqa-error-echoes-prompt", "withheld: it quotes the prompt", 2),
        ("endpoint-finish-aborted-or-error", "did not complete the request", 2),
        ("endpoint-text-not-a-string", "text is int, not a string", 1),
    ):
        problems = list(common)
        found = sum(reason in r for r in reasons)
        if found != count:
            problems.append(f"{found} request_failed events with {reason!r}, expected {count}")
        if name == "endpoint-gpqa-error-echoes-prompt":  # whatever was written, finished or not
            import pyarrow.parquet as pq

            files = [f for f in out.rglob("*") if f.is_file()]
            text = stdout + err + "".join(f.read_text("utf-8", "replace") for f in files)
            for f in (f for f in files if f.suffix == ".parquet"):
                text += json.dumps(pq.read_table(f).to_pylist(), default=str)
            if any(word in text for word in ("Quillish", "northern dialect")):
                problems.append("a sealed question reached the run's files or the output")
        results.append((name, code, problems, err[-400:]))
    return results


def _endpoint_refusals(ctx: ScenarioContext) -> list[ScenarioResult]:
    """A server that refuses the key, and one whose model list fails: one error line each."""
    stub = _Stub()
    smoke = ["--model", "tiny", "--tasks", "gsm8k_smoke", "--limit", "1", "--no-reference"]
    try:
        code, _, err = _cli(
            ctx,
            "run",
            "--endpoint",
            f"{stub.url}/refuse",
            "--api-key",
            "wrong-key",
            *smoke,
            "--out",
            str(ctx.root / "refused"),
        )
        problems = _one_error_line(code, err, "pass the server's key with --api-key", ("wrong-key", "served model"))
        results = [("endpoint-401-says-api-key", code, problems, err[-400:])]
        code, _, err = _cli(ctx, "run", "--endpoint", f"{stub.url}/unlisted", *smoke, "--out", str(ctx.root / "b"))
        problems = _one_error_line(code, err, "(HTTP 500 Internal Server Error)")
        results.append(("endpoint-http-error-one-line", code, problems, err[-400:]))
    finally:
        stub.close()
    return results


def _serve_scenarios(ctx: ScenarioContext) -> list[ScenarioResult]:
    """One `serve` with --max-queue 2: a tiny temperature decodes greedily; a request with more prompts than the
    queue holds is a 400 our client does not retry; after SIGTERM a new request gets 503 while a streamed answer in
    flight completes, and the server exits 0."""
    import re
    import signal
    import subprocess
    import threading
    import time

    import httpx
    import requests
    from specdec_eval.peers.client.requests import call_with_retries

    proc = subprocess.Popen(
        [*ctx.cli, "serve", *FAST, "--port", "0", "--max-queue", "2", "--grace", "60", "--log-level", "warning"],
        stderr=subprocess.PIPE,
        text=True,
        env=ctx.env,
    )
    lines: list[str] = []
    url = None
    for line in proc.stderr:
        lines.append(line)
        if m := re.search(r"listening on (http://\S+)", line):
            url = m.group(1)
            break
    names = ("serve-temperature-1e-40-is-greedy", "serve-more-prompts-than-max-queue", "serve-sigterm-drain-503")
    if url is None:
        proc.kill()
        return [(n, proc.wait(), ["the server did not start"], "".join(lines)[-400:]) for n in names]
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    results: list[ScenarioResult] = []
    with httpx.Client(base_url=url, timeout=ctx.timeout) as http:
        ids = [
            http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 5, "temperature": t}).json()["choices"][0][
                "token_ids"
            ]
            for t in (0, 1e-40)
        ]
        problems = [] if ids[0] == ids[1] else [f"temperature 1e-40 gave {ids[1]}, temperature 0 {ids[0]}"]
        results.append((names[0], 200, problems, ""))
        posts = []

        def send():
            posts.append(1)
            r = requests.post(url + "/v1/completions", json={"prompt": ["a", "b", "c"], "max_tokens": 1}, timeout=60)
            r.raise_for_status()
            return r.json()

        answer = call_with_retries(send, 3, lambda *a: None)
        problems = (
            []
            if "HTTP 400" in (answer.error or "") and "--max-queue 2" in answer.error
            else [f"answered {answer.error!r}"]
        )
        problems += [] if len(posts) == 1 else [f"our client sent it {len(posts)} times"]
        results.append((names[1], 400 if not problems else None, problems, answer.error or ""))
        body = {"prompt": "hi", "max_tokens": 200, "ignore_eos": True, "stream": True, "temperature": 0}
        problems = []
        with http.stream("POST", "/v1/completions", json=body) as long:
            chunks = long.iter_lines()
            got = [next(chunks)]
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)  # the signal is handled
            try:
                late = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=30)
                if late.status_code != 503:
                    problems.append(f"a request during the drain got {late.status_code}, expected 503")
            except httpx.ConnectError:
                problems.append("a request during the drain was refused, expected 503")
            got = [line for line in [*got, *chunks] if line]
        if got[-1:] != ["data: [DONE]"] or '"finish_reason":"length"' not in "".join(got).replace(" ", ""):
            problems.append("the streamed answer in flight did not complete")
    try:
        code = proc.wait(ctx.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    if code != 0 or "Traceback" in "".join(lines):
        problems.append(f"exit {code} after SIGTERM" + (", with a traceback" if code == 0 else ""))
    results.append((names[2], code, problems, "".join(lines)[-400:]))
    return results


# (the case names a scenario reports, the scenario): `probe.py -k WORD` runs those with a name holding WORD
SERVER_SCENARIOS = [
    (("serve-port-in-use",), _serve_port_in_use),
    (("serve-api-key-not-ascii",), _serve_api_key_not_ascii),
    (
        ("endpoint-gpqa-error-echoes-prompt", "endpoint-finish-aborted-or-error", "endpoint-text-not-a-string"),
        _endpoint_broken_answers,
    ),
    (("endpoint-401-says-api-key", "endpoint-http-error-one-line"), _endpoint_refusals),
    (
        ("serve-temperature-1e-40-is-greedy", "serve-more-prompts-than-max-queue", "serve-sigterm-drain-503"),
        _serve_scenarios,
    ),
]


def _hardening_scenarios() -> list:
    from probe_cases_hardening import SCENARIOS  # --- issue 38 (hardening) ---

    return SCENARIOS


SERVER_SCENARIOS += _hardening_scenarios()
