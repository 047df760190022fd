"""What a request must pass before any work is done for it: the API key (Bearer, compared in constant time) and a
bounded body (an oversize one is a 413, never read into memory whole). And what an API key may be."""

from __future__ import annotations

import hmac

from fastapi import Request

from ..errors import UserError
from .defaults import API_KEY_ENV
from .errors import ApiError

# An oversize body is still read (and thrown away) up to this much, so the client gets to see our 413 instead of
# a connection reset while it is still sending; past it the connection is simply closed after the answer.
DRAIN_LIMIT_BYTES = 64 * 2**20


def validate_api_key(api_key: str | None) -> None:
    """A key must be printable ASCII without spaces: HTTP carries header values as bytes that clients encode
    differently (curl sends UTF-8, Python's requests Latin-1, httpx refuses anything but ASCII) and the server strips
    spaces around the token, so any other key could never be matched reliably. Refused at start-up, not at the
    first request."""
    if api_key is None:
        return
    if not api_key:  # an unset $KEY: a server that looks protected and is not
        raise UserError(
            f"--api-key is empty (also when it comes from ${API_KEY_ENV}); give the key clients must "
            "send, or leave both out to serve without one"
        )
    bad = next((c for c in api_key if not "!" <= c <= "~"), None)
    if bad is not None:
        raise UserError(
            f"--api-key must be printable ASCII without spaces (HTTP headers cannot carry other "
            f"characters reliably); it holds U+{ord(bad):04X}"
        )


def check_api_key(request: Request, api_key: str | None) -> None:
    if api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    # compare_digest on every request, whatever the scheme, so the time taken says nothing about the key.
    matches = hmac.compare_digest(token.strip().encode("utf-8"), api_key.encode("utf-8"))
    if not (matches and scheme.lower() == "bearer"):
        raise ApiError(
            401,
            "invalid or missing API key (send 'Authorization: Bearer <key>')",
            type="authentication_error",
            headers={"WWW-Authenticate": "Bearer"},
        )


async def read_body(request: Request, limit: int) -> bytes:
    too_large = ApiError(413, f"request body is larger than {limit} bytes (--max-request-bytes)")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > DRAIN_LIMIT_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > DRAIN_LIMIT_BYTES:
            break
        if size <= limit:
            chunks.append(chunk)
    if size > limit:
        raise too_large
    return b"".join(chunks)
