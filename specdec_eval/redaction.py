"""Secrets out of what is recorded: a command line (`redact_argv`: a run's own, or a server command a run started)
and a line of text (`redact_text`: a server's log line). A leaf module: the run store (results/), the endpoint
engine and its server process (peers/) use the same rules, and neither may import the other.

Every pattern is linear in the line's length (each can start only where a word starts, so no start position rescans
what another already scanned), and a line is cut to `MAX_LINE_CHARS` before any pattern runs: a server that prints
one 10 MB line must not stall the run that reads its log."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Options whose value is a secret (`--api-key KEY` or `--api-key=KEY`), and `name=value` pairs of the same kind
# inside one argument (lm-eval's `--model_args base_url=...,api_key=KEY`, or `HF_TOKEN=...` before a command). Not
# `--model-key`: a reference key. Also the name of an environment variable that holds one (`HF_TOKEN`,
# `OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`), before a command or as a key of a recorded mapping.
SECRET_NAME = r"(?:[\w-]*[-_])?(?:api[-_]?key|access[-_]?key|private[-_]?key|token|password|passwd|secret|credentials?)"
_SECRET_OPTION = re.compile(rf"--{SECRET_NAME}", re.IGNORECASE)
_SECRET_PAIR = re.compile(rf"((?:^|[,;&?\s]){SECRET_NAME}=)(\"[^\"\n]*\"|'[^'\n]*'|[^,;&\s]+)", re.IGNORECASE)
# The same option inside a line of text or a quoted command: `--api-key KEY`, `--api-key=KEY`, `--api_key: KEY`,
# `--api-key "K E Y"`. Only where a word starts (not inside `a--b`), so a run of dashes is scanned once.
_SECRET_OPTION_IN_TEXT = re.compile(
    rf"((?<![\w-])--{SECRET_NAME}(?:=|:?\s+))(\"[^\"\n]*\"|'[^'\n]*'|\S+)", re.IGNORECASE
)
# An HTTP credential as a server or curl prints it: `Authorization: Bearer KEY`, `authorization="Basic KEY"`.
_AUTHORIZATION = re.compile(
    r"(\b(?:proxy-)?authorization[\"']?\s{0,8}[:=]\s{0,8}[\"']?(?:(?:bearer|basic|token)\s{1,8})?|\bbearer\s{1,8})"
    r"([^\s\"',;]+)",
    re.IGNORECASE,
)
# user[:password]@ in a URL: a password, or a token passed as the user name (https://TOKEN@host). The scheme starts
# where a word starts (otherwise each letter of a long word would start a scan to its end: quadratic).
_URL_USERINFO = re.compile(r"((?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
REDACTED = "***"
MAX_LINE_CHARS = 64 * 1024  # far beyond any real log line or command; what is beyond it is cut, unread


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line as a manifest may record it: the value of every secret option (`--api-key KEY`,
    `--api-key=KEY`), `api_key=KEY`-style pairs, the user and password of every URL (`http://u:p@host`), and the
    same inside one argument that holds a whole command (`--serve-cmd "vllm serve M --api-key KEY"`, `-H
    "Authorization: Bearer KEY"`) replaced by ***. Everything else is kept verbatim, so the command still says what
    ran."""
    out: list[str] = []
    secret_next = False
    for arg in argv:
        arg = str(arg)
        if secret_next:
            out.append(REDACTED)
            secret_next = False
            continue
        option, eq, _ = arg.partition("=")
        if _SECRET_OPTION.fullmatch(option):
            if eq:
                out.append(f"{option}={REDACTED}")
            else:
                out.append(arg)
                secret_next = True
            continue
        out.append(redact_text(arg))
    return out


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """A line of free text (a server's log line, a command in one string) with the same secrets replaced by ***:
    secret options and pairs, HTTP credentials, URL credentials, and every string of `secrets` (keys known to the
    caller) wherever it appears. A line longer than `MAX_LINE_CHARS` is cut first (`bounded`)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)  # before the cut: a known key is hidden wherever it stands
    text = bounded(text)
    text = _URL_USERINFO.sub(rf"\g<1>{REDACTED}@", text)
    text = _SECRET_OPTION_IN_TEXT.sub(rf"\g<1>{REDACTED}", text)
    text = _AUTHORIZATION.sub(rf"\g<1>{REDACTED}", text)
    return _SECRET_PAIR.sub(rf"\g<1>{REDACTED}", text)


def bounded(text: str, limit: int | None = None) -> str:
    """`text` when it has at most `limit` (default `MAX_LINE_CHARS`) characters; else its start up to the last
    whitespace before the limit (a secret the cut would split is dropped whole, not left half-shown), and how much
    was cut."""
    limit = MAX_LINE_CHARS if limit is None else limit
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = max(head.rfind(" "), head.rfind("\t"))
    kept = head[:space] if space > 0 else ""
    return f"{kept} [{len(text) - len(kept)} more characters cut]"
