"""Sealed fields: stored data that must not be readable as text (GPQA-Diamond outputs, which can quote their question;
GPQA's own release is a password-protected zip for the same reason: keep the questions out of crawled text).

A sealed value is JSON, zlib-compressed, XOR-ed with a keystream derived from a fixed key, base64 (urlsafe), with a
`sealed:v1:` prefix: nothing a crawler, a grep or a base64/zlib decoder recovers, and exactly the value again
through `unseal`. It is not encryption against someone who reads this file; it is the same kind of lock as the
zip's published password."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import Any

PREFIX = "sealed:v1:"
_KEY = b"specdec-eval keeps benchmark questions out of plain text"


def _keystream(n: int, nonce: bytes) -> bytes:
    out, counter = bytearray(), 0
    while len(out) < n:
        out += hashlib.blake2b(nonce + counter.to_bytes(8, "little"), key=_KEY[:64], digest_size=64).digest()
        counter += 1
    return bytes(out[:n])


def seal(value: Any) -> str:
    data = zlib.compress(json.dumps(value, separators=(",", ":")).encode("utf-8"))
    nonce = hashlib.blake2b(data, digest_size=8).digest()  # deterministic: the same value seals the same way
    body = bytes(a ^ b for a, b in zip(data, _keystream(len(data), nonce), strict=True))
    return PREFIX + base64.urlsafe_b64encode(nonce + body).decode("ascii")


def is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def unseal(text: str) -> Any:
    """The value; ValueError for anything that is not a well-formed sealed value."""
    if not is_sealed(text):
        raise ValueError("not a sealed value")
    try:
        raw = base64.urlsafe_b64decode(text[len(PREFIX) :].encode("ascii"))
        nonce, body = raw[:8], raw[8:]
        data = bytes(a ^ b for a, b in zip(body, _keystream(len(body), nonce), strict=True))
        return json.loads(zlib.decompress(data).decode("utf-8"))
    except (ValueError, zlib.error, UnicodeDecodeError) as e:
        raise ValueError(f"a corrupt sealed value ({type(e).__name__})") from None
