"""File names made from text a user chose (a sweep cell's axis values): one name per text, never too long.

A text made only of letters, digits and `_ . = -` (starting with a letter or digit) is its own name when short.
Any other text gets a readable part (its characters outside that set as `_`, cut) and `~` with a hash of the
text: `~` never stands in a name used as is, so a hashed name cannot meet a plain one (`x+1` and `x_1` differ),
and no name exceeds what a file system allows (255 bytes) whatever the text's length."""

from __future__ import annotations

import hashlib
import re

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]*")
_OTHER = re.compile(r"[^A-Za-z0-9_.=-]+")
MAX_PLAIN = 120  # a name used as is; with a suffix and a hash far below 255 bytes
_KEPT = 80  # the readable part of a hashed name


def file_name(text: str, identity: str | None = None, suffix: str = "") -> str:
    """The file name of `text` (+ suffix). identity: what tells two texts apart when `text` alone may not (it
    forces a hashed name); default `text` itself."""
    if identity is None and len(text) <= MAX_PLAIN and _PLAIN.fullmatch(text):
        return text + suffix
    digest = hashlib.sha256((text if identity is None else identity).encode("utf-8", "surrogatepass")).hexdigest()
    readable = _OTHER.sub("_", text)[:_KEPT].lstrip(".")
    return f"{readable}~{digest[:16]}{suffix}"
