"""Text read from files people edit by hand (waives.txt, a run's manifest) made safe to print on a terminal.

A test id or a reason may hold an escape sequence (ESC [ 2 J clears the screen, OSC 8 writes a link, a bidi override
reverses what follows); printed raw, the file would drive the reader's terminal. Every character that is not
printable text on one line (Unicode categories Cc, Cf, Cs, Zl, Zp: controls, format characters, lone surrogates,
line and paragraph separators) is shown as its Python escape instead: `\\x1b`, `\\u202e`, `\\udcff`.
"""

from __future__ import annotations

import unicodedata

_NOT_PRINTABLE = ("Cc", "Cf", "Cs", "Zl", "Zp")


def printable(text: object) -> str:
    """str(text) with every character that is not printable on one line written as its escape."""
    s = str(text)
    if s.isprintable():  # the common case, and exactly "no character outside categories L, M, N, P, S, Zs"
        return s
    return "".join(_escape(ch) if unicodedata.category(ch) in _NOT_PRINTABLE else ch for ch in s)


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"
