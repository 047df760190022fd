"""TensorRT-LLM-format waives.txt: read, query, edit and validate without disturbing one untouched byte.

One waive per line::

    [full:<GPU>/]<test id> [<test id> ...] <MARKER>[ (<reason>)][ # <comment>]

MARKER is one of SKIP, XFAIL, UNSTABLE, TIMEOUT (reason = minutes), ISOLATION. A test id may carry a pytest
selection (`unittest/_torch -k "partition0"`); brackets, parentheses and quotes group text that holds spaces.
The `full:<GPU>/` prefix is written once, before the first id, and applies to every id on the line.

The file is kept as its raw lines (line endings included); an edit replaces, inserts or drops whole lines and
every other line is written back exactly as read. Lines that do not parse are kept as they are and reported by
`validate()`. This module never imports `workers/`: errors are `ValueError` / `FileNotFoundError` with a
one-line message, which the CLI turns into its own user error; a path that is not a regular file of a sane size
(/dev/zero, a FIFO) is the user error of `specdec_eval.user_files`, raised before any lock is taken.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..records import locks
from ..records.atomic import atomic_write
from ..user_files import check_regular, read_limited

MARKERS = ("SKIP", "XFAIL", "UNSTABLE", "TIMEOUT", "ISOLATION")
GPU_PREFIX = "full:"
BOM = "\ufeff"  # a UTF-8 byte-order mark, as decoded
_UPPER_WORD = re.compile(r"[A-Z][A-Z0-9_]*")
# Raw bytes that are not UTF-8 survive a read/write round trip as lone surrogates.
_ENCODING, _ERRORS = "utf-8", "surrogateescape"


@dataclass
class WaiveEntry:
    """One parsed waive line. `raw` is the exact line as read, line ending included."""

    gpu: str | None
    test_ids: list[str]
    marker: str
    reason: str | None
    comment: str | None
    line_no: int
    raw: str
    # Something validate() reports (unknown marker, stray text after the marker, ...); the line still parsed.
    problem: str | None = None
    # Where each test id sits in `raw`, so that one id can be cut out of a line without re-rendering it.
    id_spans: list[tuple[int, int]] = field(default_factory=list, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The line without its line ending (nor a byte-order mark at its start)."""
        return _strip_ending(self.raw).removeprefix(BOM)

    @property
    def timeout_minutes(self) -> int | None:
        """`TIMEOUT (N)` means N minutes; None for other markers or a reason that is not a number."""
        if self.marker != "TIMEOUT" or self.reason is None or not self.reason.strip().isdigit():
            return None
        return int(self.reason)


@dataclass
class InvalidLine:
    """A line that is neither blank, a comment nor a waive; kept untouched and reported by validate()."""

    line_no: int
    raw: str
    error: str


def _strip_ending(line: str) -> str:
    return line[:-2] if line.endswith("\r\n") else line[:-1] if line.endswith("\n") else line


def _ending(line: str) -> str:
    return line[len(_strip_ending(line)) :]


def split_lines(text: str) -> list[str]:
    """Lines with their endings; only '\\n' ends a line (str.splitlines would also split on \\f, \\x1c, ...)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])  # the last line has no line ending
    return lines


def _scan(content: str) -> tuple[list[tuple[int, int]], int | None]:
    """Whitespace-separated top-level tokens of `content` as (start, end), and where a `#` comment starts.

    Brackets and parentheses group (`test[a b]`, `(a reason)`); so do quotes, but only outside brackets and
    parentheses, because a free-text reason such as `(doesn't work)` holds a lone apostrophe.
    """
    tokens: list[tuple[int, int]] = []
    start: int | None = None
    depth, quote = 0, ""
    for i, ch in enumerate(content):
        if quote:
            quote = "" if ch == quote else quote
            continue
        if depth == 0 and (ch == "#" or ch.isspace()):
            if start is not None:
                tokens.append((start, i))
                start = None
            if ch == "#":
                return tokens, i
            continue
        if start is None:
            start = i
        if depth == 0 and ch in "\"'":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]" and depth:
            depth -= 1
    if start is not None:
        tokens.append((start, len(content)))
    return tokens, None


def _group_ids(content: str, tokens: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Join a pytest option (`-k EXPR`, `-m EXPR`, `--opt=x`) and its value onto the test id before it."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(tokens):
        start, end = tokens[i]
        tok = content[start:end]
        if tok.startswith("-") and len(tok) > 1 and spans:
            if len(tok) == 2 and i + 1 < len(tokens):  # a short option takes the next token as its value
                i += 1
                end = tokens[i][1]
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
        i += 1
    return spans


def _find_marker(content: str, tokens: list[tuple[int, int]]) -> int | None:
    """Index of the marker token: the first known marker after the first token, else (for validate to
    report) an upper-case word followed by nothing or by a parenthesised reason."""
    for i in range(1, len(tokens)):
        tok = content[tokens[i][0] : tokens[i][1]]
        if any(tok == m or tok.startswith(m + "(") for m in MARKERS):
            return i
    for i in range(1, len(tokens)):
        tok = content[tokens[i][0] : tokens[i][1]]
        word = _UPPER_WORD.match(tok)
        alone = word is not None and (word.end() == len(tok) or tok[word.end()] == "(")
        if alone and (i + 1 == len(tokens) or content[tokens[i + 1][0]] == "("):
            return i
    return None


def _parse_reason(rest: str) -> tuple[str | None, str | None]:
    """(reason, problem) from the text between the marker and the comment."""
    rest = rest.strip()
    if not rest:
        return None, None
    if not rest.startswith("("):
        return None, f"text after the marker is neither '(reason)' nor a '# comment': {rest!r}"
    depth = 0
    for i, ch in enumerate(rest):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            reason = rest[1:i].strip()
            if rest[i + 1 :].strip():
                return reason, f"text after the closing parenthesis: {rest[i + 1 :].strip()!r}"
            return reason, None
    return rest[1:].strip(), "unbalanced parentheses in the reason"


def parse_line(raw: str, line_no: int) -> WaiveEntry | InvalidLine | None:
    """A waive, an invalid line, or None for a blank or comment line."""
    content = _strip_ending(raw)
    # A UTF-8 byte-order mark reads as one character (at the top, or where files were concatenated); a space in its
    # place keeps every offset in `raw`, and keeps U+FEFF out of the first test id.
    content = " " + content[1:] if content.startswith(BOM) else content
    stripped = content.strip()
    if not stripped or stripped.startswith("#"):
        return None
    tokens, comment_at = _scan(content)
    comment = content[comment_at + 1 :].strip() if comment_at is not None else None
    if not tokens:
        return None
    gpu = None
    first_start, first_end = tokens[0]
    if content.startswith(GPU_PREFIX, first_start):
        slash = content.find("/", first_start + len(GPU_PREFIX), first_end)
        gpu = content[first_start + len(GPU_PREFIX) : slash] if slash >= 0 else ""
        if not gpu or slash + 1 >= first_end:
            return InvalidLine(line_no, raw, f"expected 'full:<GPU>/<test id>', got {content[first_start:first_end]!r}")
        tokens[0] = (slash + 1, first_end)
    at = _find_marker(content, tokens)
    if at is None:
        return InvalidLine(line_no, raw, f"no marker (one of {', '.join(MARKERS)}) after the test id")
    marker_start, marker_end = tokens[at]
    marker = _UPPER_WORD.match(content, marker_start, marker_end).group()
    end = comment_at if comment_at is not None else len(content)
    reason, problem = _parse_reason(content[marker_start + len(marker) : end])
    if marker not in MARKERS:
        problem = f"unknown marker {marker!r} (expected one of {', '.join(MARKERS)})"
    elif marker == "TIMEOUT" and not (reason or "").strip().isdigit():
        problem = problem or f"TIMEOUT needs a number of minutes, as in 'TIMEOUT (90)', got {reason!r}"
    spans = _group_ids(content, tokens[:at])
    ids = [content[a:b] for a, b in spans]
    return WaiveEntry(gpu, ids, marker, reason, comment, line_no, raw, problem, spans)


# Unicode categories refused in text written into a waive line: control characters (newline, carriage return,
# tab, NUL, ESC, NEL, ...), format characters (bidi overrides, zero-width), line and paragraph separators, and lone
# surrogates (bytes that were not UTF-8). A newline in a reason would start a second, valid waive line.
_NOT_ONE_LINE = ("Cc", "Cf", "Cs", "Zl", "Zp")


def check_one_line(text: str, what: str) -> None:
    """ValueError (one line, the character shown as U+XXXX) if `text` holds a character that is not printable
    text on one line."""
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in _NOT_ONE_LINE:
            name = unicodedata.name(ch, "control character")
            raise ValueError(
                f"cannot write this waive as one line: {what} holds U+{ord(ch):04X} ({name.lower()}) at "
                f"position {i + 1}; a waive is one line of printable text"
            )


def format_line(test_id: str, reason: str | None, gpu: str | None = None, marker: str = "SKIP") -> str:
    """The text of one waive line, without a line ending."""
    prefix = f"{GPU_PREFIX}{gpu}/" if gpu else ""
    return f"{prefix}{test_id} {marker}" + (f" ({reason})" if reason else "")


@dataclass
class WaivesFile:
    """A waives file as raw lines plus what they parse to. `entries`/`invalid` follow every edit."""

    lines: list[str] = field(default_factory=list)
    path: Path | None = None
    entries: list[WaiveEntry] = field(init=False, default_factory=list)
    invalid: list[InvalidLine] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._reparse()

    @classmethod
    def parse(cls, text: str) -> WaivesFile:
        return cls(split_lines(text))

    @classmethod
    def read(cls, path: str | os.PathLike) -> WaivesFile:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"waives file not found: {path}")
        if path.is_dir():
            raise IsADirectoryError(f"waives file is a directory: {path}")
        data = read_limited(path, "waives file")  # a device or a FIFO: one line, never an endless read
        return cls(split_lines(data.decode(_ENCODING, _ERRORS)), path)

    def render(self) -> str:
        return "".join(self.lines)

    def write(self, path: str | os.PathLike | None = None) -> Path:
        """Write atomically. Not a lock: `edit_waives` holds one around read, edit and write."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("no path to write the waives file to")
        # Keep the permissions of the file being replaced; a new file gets the default (0666 minus the umask).
        mode = target.stat().st_mode & 0o7777 if target.exists() else None
        atomic_write(target, self.render().encode(_ENCODING, _ERRORS), mode)
        self.path = target
        return target

    def _reparse(self) -> None:
        self.entries, self.invalid = [], []
        for no, raw in enumerate(self.lines, start=1):
            parsed = parse_line(raw, no)
            if isinstance(parsed, WaiveEntry):
                self.entries.append(parsed)
            elif isinstance(parsed, InvalidLine):
                self.invalid.append(parsed)

    def find(self, test_id: str, gpu: str | None = None) -> list[WaiveEntry]:
        """Waives that apply to `test_id` (exact id match) on `gpu`.

        gpu=None: only waives without `full:` (those apply everywhere). gpu="H100": those plus `full:H100/`.
        """
        return [e for e in self.entries if test_id in e.test_ids and e.gpu in (None, gpu)]

    def _exact(self, test_id: str, gpu: str | None) -> list[WaiveEntry]:
        return [e for e in self.entries if test_id in e.test_ids and e.gpu == gpu]

    def dominant_ending(self) -> str:
        crlf = sum(line.endswith("\r\n") for line in self.lines)
        lf = sum(line.endswith("\n") for line in self.lines) - crlf
        return "\r\n" if crlf > lf else "\n"

    def waive(self, test_id: str, reason_or_url: str | None, gpu: str | None = None, marker: str = "SKIP") -> bool:
        """Add `[full:GPU/]TEST MARKER (REASON)`; False (nothing changed) if that test id is already waived
        with exactly that gpu (None: the line without `full:`).

        The line goes before the first waive line whose text sorts after it, else at the end of the file.
        """
        check_one_line(test_id, "the test id")
        check_one_line(reason_or_url or "", "the reason")
        if gpu is not None:
            check_one_line(gpu, "the GPU name")
        test_id, reason_or_url = test_id.strip(), (reason_or_url or "").strip()
        if marker not in MARKERS:
            raise ValueError(f"unknown marker {marker!r} (expected one of {', '.join(MARKERS)})")
        if gpu is not None and (not gpu or "/" in gpu or any(c.isspace() for c in gpu)):
            raise ValueError(f"a GPU name cannot be empty or hold '/' or spaces: {gpu!r}")
        text = format_line(test_id, reason_or_url, gpu, marker)
        # What does not read back as this one waive (a '#', a newline, unbalanced brackets, ...) is refused.
        back = parse_line(text, 0)
        expected = (gpu, [test_id], marker, reason_or_url or None, None, None)
        if not isinstance(back, WaiveEntry) or expected != (
            back.gpu,
            back.test_ids,
            back.marker,
            back.reason,
            back.comment,
            back.problem,
        ):
            why = back.problem if isinstance(back, WaiveEntry) and back.problem else "it does not read back as one"
            raise ValueError(f"cannot write this waive as one line ({why}): {text!r}")
        if self._exact(test_id, gpu):
            return False
        after = next((e for e in self.entries if e.text.removeprefix(BOM) > text), None)
        ending = self.dominant_ending()
        if after is not None:
            self.lines.insert(after.line_no - 1, text + ending)
            if after.line_no == 1:
                self._keep_bom_on_top()
        elif self.lines and not _ending(self.lines[-1]):
            # The file ends without a newline: end the old last line, and keep the file ending as it did.
            self.lines[-1] += ending
            self.lines.append(text)
        else:
            self.lines.append(text + ending)
        self._reparse()
        return True

    def _keep_bom_on_top(self) -> None:
        """After a line was inserted above the first: the byte-order mark moves up with the top of the file."""
        if len(self.lines) > 1 and self.lines[1].startswith(BOM):
            self.lines[0], self.lines[1] = BOM + self.lines[0], self.lines[1][1:]

    def unwaive(self, test_id: str, gpu: str | None = None) -> list[WaiveEntry]:
        """Remove the waives of exactly `test_id` with exactly `gpu` (None: only lines without `full:`).

        A line that lists other test ids too loses only this id; a line left without ids is dropped.
        Returns the matching entries as they were before the edit.
        """
        removed = self._exact(test_id, gpu)
        for entry in reversed(removed):  # bottom-up, so that earlier line numbers stay valid
            keep = [i for i, t in enumerate(entry.test_ids) if t != test_id]
            if not keep:
                bom = entry.line_no == 1 and entry.raw.startswith(BOM)
                del self.lines[entry.line_no - 1]
                if bom and self.lines:
                    self.lines[0] = BOM + self.lines[0]  # the mark stays at the top of the file
                continue
            raw, spans = entry.raw, entry.id_spans
            # Each kept id keeps the gap that followed it, except the new last one, which is followed directly
            # by what followed the old last id (gap, marker, reason, comment, line ending).
            parts = [raw[: spans[0][0]]]
            parts += [raw[spans[j][0] : spans[j + 1][0]] for j in keep[:-1]]
            parts += [raw[spans[keep[-1]][0] : spans[keep[-1]][1]], raw[spans[-1][1] :]]
            raw = "".join(parts)
            self.lines[entry.line_no - 1] = raw
        if removed:
            self._reparse()
        return removed

    def validate(self) -> list[str]:
        """Problems, one line each, prefixed with 'line N:', in line order."""
        problems = [(bad.line_no, bad.error) for bad in self.invalid]
        problems += [
            (no, _BOM_PROBLEM if no == 1 else _BOM_INSIDE)
            for no, line in enumerate(self.lines, start=1)
            if line.startswith(BOM)
        ]
        problems += [(e.line_no, e.problem) for e in self.entries if e.problem]
        first: dict[tuple[str, str | None], int] = {}
        for e in self.entries:
            for test_id in e.test_ids:
                key = (test_id, e.gpu)
                if key in first:
                    where = f" on {e.gpu}" if e.gpu else ""
                    problems.append((e.line_no, f"duplicate waive of {test_id!r}{where} (first on line {first[key]})"))
                else:
                    first[key] = e.line_no
        return [f"line {no}: {msg}" for no, msg in sorted(problems, key=lambda p: p[0])]


_BOM_PROBLEM = (
    "starts with a UTF-8 byte-order mark (U+FEFF): specdec-eval skips it, but a reader that does not "
    "would take it as part of the first test id; save the file as UTF-8 without BOM"
)
_BOM_INSIDE = (
    "starts with U+FEFF (a byte-order mark inside the file, as left by joining files): specdec-eval skips "
    "it, other readers would take it as part of the test id"
)


def lock_path(path: str | os.PathLike) -> Path:
    """The sidecar lock file of a waives file: `.<name>.lock` in the same folder."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextmanager
def edit_waives(path: str | os.PathLike, create: bool = False) -> Iterator[WaivesFile]:
    """Read, edit and write a waives file under its lock, so that concurrent editors never lose each other's lines.

    Holds an exclusive `fcntl.flock` on the sidecar `lock_path(path)` for the whole block: the file is read after
    the lock is taken and, if the block changed it, written back (atomically) before the lock is released.
    create: a missing file reads as empty (and is written only if the block adds something); otherwise
    FileNotFoundError. The folder must exist.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"waives file is a directory: {path}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"folder of the waives file not found: {path.parent}")
    check_regular(path, "waives file")  # before the lock: /dev/full's would be /dev/.full.lock
    with locks.lock(lock_path(path)):
        waives = WaivesFile.read(path) if (path.exists() or not create) else WaivesFile(path=path)
        before = waives.render()
        yield waives
        if waives.render() != before:
            waives.write(path)
