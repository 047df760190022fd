"""Secrets out of what is recorded: a command line (`redact_argv`: a run's own, or a server command a run started)
and a line of text (`redact_text`: a server's log line). A leaf module: the run store (results/), the endpoint
engine and its server process (workers/remote/) use the same rules, and neither may import the other."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Options whose value is a secret (`--api-key KEY` or `--api-key=KEY`), and `name=value` pairs of the same kind
# inside one argument (lm-eval's `--model_args base_url=...,api_key=KEY`, or `HF_TOKEN=...` before a command). Not
# `--model-key`: a reference key.
_SECRET_NAME = r"(?:[\w-]*[-_])?(?:api[-_]?key|token|password|passwd|secret)"
_SECRET_OPTION = re.compile(rf"--{_SECRET_NAME}", re.IGNORECASE)
_SECRET_PAIR = re.compile(rf"((?:^|[,;&?\s]){_SECRET_NAME}=)([^,;&\s]+)", re.IGNORECASE)
# The same option inside a line of text: `--api-key KEY`, `--api-key=KEY`, `--api_key: KEY`.
_SECRET_OPTION_IN_TEXT = re.compile(rf"(--{_SECRET_NAME}(?:=|:?\s+))(\S+)", re.IGNORECASE)
# user[:password]@ in a URL: a password, or a token passed as the user name (https://TOKEN@host).
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
REDACTED = "***"


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line as a manifest may record it: the value of every secret option (`--api-key KEY`,
    `--api-key=KEY`), `api_key=KEY`-style pairs, and the user and password of every URL (`http://u:p@host`)
    replaced by ***. Everything else is kept verbatim, so the command still says what ran."""
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
        arg = _URL_USERINFO.sub(rf"\g<1>{REDACTED}@", arg)
        out.append(_SECRET_PAIR.sub(rf"\g<1>{REDACTED}", arg))
    return out


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """A line of free text (a server's log line) with the same secrets replaced by ***: secret options and pairs,
    URL credentials, and every string of `secrets` (keys known to the caller) wherever it appears."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    text = _URL_USERINFO.sub(rf"\g<1>{REDACTED}@", text)
    text = _SECRET_OPTION_IN_TEXT.sub(rf"\g<1>{REDACTED}", text)
    return _SECRET_PAIR.sub(rf"\g<1>{REDACTED}", text)
