"""The docs site's own checks, run by the strict build (scripts/docs/hooks.py) and by tests/docs/.

Each check returns a list of problems (one line each; empty when clean), so that the build can log them as
warnings (`mkdocs build --strict` fails on any) and a test can assert on them:

- `command_problems`: every `specdec-eval ...` line in a shell block names a command that exists and only the
  `--flags` that command has (read from the Typer app itself, never from a copied list);
- `example_marker_problems`: every shell block that runs `specdec-eval` says whether CI executes it
  (`<!-- example: ci -->`) or what it needs that CI has not (`<!-- example: needs ... -->`);
- `path_problems`: every repository path a page names in backticks exists (so the architecture page cannot drift);
- `citation_problems`: product text (code, docs, README) cites no file the repository does not hold
  (a design note kept outside it, say).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROG = "specdec-eval"
# Commands that hand the flags after a lone `--` to `run` (ab's sides, sweep's cells).
PASSES_TO_RUN = {("ab",), ("sweep",)}
SHELL_LANGS = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*example:\s*(?P<what>[^>]*?)\s*-->\s*$")


@dataclass(frozen=True)
class Command:
    """One command of the CLI: its options (every spelling) and whether it takes anything at all (lm-eval)."""

    options: frozenset[str]
    passthrough: bool = False
    group: bool = False


@cache
def cli_commands() -> dict[tuple[str, ...], Command]:
    """Every command path of the Typer app (("run",), ("engine", "info"), ...) with its options."""
    import typer.main
    from specdec_eval.cli.main import app

    found: dict[tuple[str, ...], Command] = {}

    def walk(cmd, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            found[path] = Command(frozenset({"--help"}), group=True)
            for name, sub in subs.items():
                walk(sub, (*path, name))
            return
        options = {o for p in cmd.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
        options |= {"--help"}
        found[path] = Command(frozenset(o for o in options if o.startswith("-")), passthrough=path == ("lm-eval",))

    walk(typer.main.get_command(app), ())
    return found


def shell_blocks(markdown: str) -> list[tuple[int, str, str, str]]:
    """(line number, language, body, marker text or '') of every fenced block of a page."""
    blocks = []
    for m in FENCE.finditer(markdown):
        line = markdown.count("\n", 0, m.start()) + 1
        before = markdown[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        blocks.append((line, m.group("lang").lower(), m.group("body"), marker.group("what") if marker else ""))
    return blocks


def logical_lines(body: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comments and prompts dropped."""
    lines, current = [], ""
    for raw in body.splitlines():
        text = raw.rstrip()
        if text.endswith("\\"):
            current += text[:-1] + " "
            continue
        current += text
        lines.append(current.strip().removeprefix("$ "))
        current = ""
    if current.strip():
        lines.append(current.strip())
    return [line for line in lines if line and not line.startswith("#")]


def _words(line: str) -> list[str]:
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return list(lexer)
    except ValueError:  # an unbalanced quote in a prose-like line: fall back to plain words
        return line.split()


def invocations(line: str) -> list[list[str]]:
    """The argument lists after each `specdec-eval` (or `-m specdec_eval.cli.main`) in one shell line."""
    words, found = _words(line), []
    for i, word in enumerate(words):
        starts = word == PROG or word.endswith("/" + PROG)
        module = word == "specdec_eval.cli.main" and i > 0 and words[i - 1] == "-m"
        if not (starts or module):
            continue
        args = []
        for w in words[i + 1 :]:
            if w in {";", "&&", "||", "|", "&", ">", "2>", "2>&1"} or set(w) <= set(";&|"):
                break
            args.append(w)
        found.append(args)
    return found


def _option_name(word: str) -> str:
    return word.strip("[]").split("=", 1)[0]


def invocation_problems(args: list[str]) -> list[str]:
    """What in one invocation the CLI does not have: an unknown command or an option its command lacks."""
    commands = cli_commands()
    path: tuple[str, ...] = ()
    rest = list(args)
    while commands[path].group and rest and not rest[0].startswith("-"):
        nxt = (*path, rest[0])
        if nxt not in commands:
            return [f"'{PROG} {' '.join(nxt)}': no such command"]
        path, rest = nxt, rest[1:]
    if path == ():
        return []  # `specdec-eval --help` or a bare mention
    command = commands[path]
    if command.passthrough:
        return []
    problems, options = [], command.options
    for word in rest:
        if word == "--":
            if path in PASSES_TO_RUN:
                options, path = commands[("run",)].options, ("run",)
                continue
            break
        name = _option_name(word)
        if name.startswith("--") and len(name) > 2 and name not in options:
            problems.append(f"'{PROG} {' '.join(path)}' has no option {name}")
    return problems


def command_problems(markdown: str) -> list[str]:
    """Unknown commands and options in a page's shell blocks, each with the line of its block."""
    problems = []
    for line_no, lang, body, _ in shell_blocks(markdown):
        if lang not in SHELL_LANGS:
            continue
        for line in logical_lines(body):
            for args in invocations(line):
                problems += [f"line {line_no}: {p}" for p in invocation_problems(args)]
    return problems


def example_marker_problems(markdown: str) -> list[str]:
    """Shell blocks that run the CLI but say neither that CI runs them nor what they need."""
    problems = []
    for line_no, lang, body, marker in shell_blocks(markdown):
        if lang not in SHELL_LANGS or not any(invocations(line) for line in logical_lines(body)):
            continue
        if not (marker == "ci" or marker.startswith("ci ") or marker.startswith("needs ")):
            problems.append(
                f"line {line_no}: a shell block runs {PROG} without '<!-- example: ci -->' or "
                "'<!-- example: needs WHAT -->' right above it"
            )
    return problems


# Backticked spans that name something in the repository: a top-level folder, then a path.
TOP_LEVEL = r"(?:cli|workers|evals|launch|results|serve|stats|studies|scripts|tests|examples|specdec_eval|docs|peers)"
REPO_PATH = re.compile(rf"`(?P<path>{TOP_LEVEL}/[\w./*-]*)`")


def path_problems(markdown: str, repo: Path = REPO) -> list[str]:
    """Backticked repository paths (`workers/engine/step.py`, `evals/gates/`) that the repository lacks."""
    problems = []
    for m in REPO_PATH.finditer(markdown):
        path = m.group("path").rstrip(".")
        if not path or path.endswith("/*") and not path[:-2]:
            continue
        hits = list(repo.glob(path.rstrip("/"))) if "*" in path else [repo / path.rstrip("/")]
        if not any(h.exists() for h in hits):
            line = markdown.count("\n", 0, m.start()) + 1
            problems.append(f"line {line}: `{path}` is not in the repository")
    return problems


# A cited file: a capitalised Markdown note (a name in capitals, then .md) or any path to a .md file; and the
# notes folder of the machine the project was first built on (spelled in two parts: this line cites nothing).
CITED_MD = re.compile(r"(?<![\w/.-])(?P<path>(?:[\w.-]+/)+[\w.-]+\.md|[A-Z][A-Z_-]+\.md)\b")
SHARED_NOTE = re.compile(r"(?<![\w-])(?:\.\./)?shared" + r"/reference\b[\w./-]*")
PRODUCT_GLOBS = (
    "cli/**/*.py",
    "workers/**/*.py",
    "evals/**/*.py",
    "evals/**/*.yaml",
    "launch/**/*.py",
    "results/**/*.py",
    "serve/**/*.py",
    "stats/**/*.py",
    "studies/**/*.py",
    "specdec_eval/**/*.py",
    "scripts/**/*.py",
    "scripts/**/*.sh",
    "docs/**/*.md",
    "README.md",
    "pyproject.toml",
    "Makefile",
    "mkdocs.yml",
)


SKIP_DIRS = {
    ".venv",
    ".venv-vllm",
    ".git",
    "site",
    "node_modules",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    "runs",
}


@cache
def repo_files(repo: Path) -> tuple[str, ...]:
    """Every file and folder of the repository as a relative POSIX path (venvs, caches and build output pruned)."""
    found = []
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        rel = Path(root).relative_to(repo)
        found += [(rel / name).as_posix() for name in (*dirs, *files)]
    return tuple(found)


def _cited_file_exists(cited: str, source: Path, repo: Path) -> bool:
    """Inside the repository only: a note beside the clone (`../shared/...`) is not one the reader has."""
    for candidate in ((source.parent / cited).resolve(), (repo / cited).resolve()):
        if candidate.is_relative_to(repo.resolve()) and candidate.exists():
            return True
    if cited.startswith("../"):
        return False
    return any(p == cited or p.endswith("/" + cited) for p in repo_files(repo))


def citation_problems(repo: Path = REPO, files: list[Path] | None = None) -> list[str]:
    """Product text that cites a file the repository does not hold (a design or style note kept elsewhere)."""
    if files is None:
        files = sorted({p for pattern in PRODUCT_GLOBS for p in repo.glob(pattern)})
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        rel = path.relative_to(repo).as_posix() if path.is_relative_to(repo) else str(path)
        shared = [(m.start(), m.end()) for m in SHARED_NOTE.finditer(text)]
        for start, end in shared:
            line = text.count("\n", 0, start) + 1
            problems.append(f"{rel}:{line}: cites {text[start:end].rstrip('.')}, which is not in the repository")
        for m in CITED_MD.finditer(text):
            if any(s <= m.start() < e for s, e in shared):
                continue
            if not _cited_file_exists(m.group("path"), path, repo):
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{rel}:{line}: cites {m.group('path')}, which is not in the repository")
    return problems


# A bare module or folder name in backticks (`twin_audit.py`, `heads/`): it must exist somewhere in the repository.
BARE_MODULE = re.compile(r"`(?P<name>[A-Za-z_][\w-]*\.(?:py|yaml|sh|cmake))`")


@cache
def _repo_names(repo: Path) -> frozenset[str]:
    return frozenset(p.rsplit("/", 1)[-1] for p in repo_files(repo))


def module_problems(markdown: str, repo: Path = REPO) -> list[str]:
    """Bare module names in backticks (`executor.py`) that no file in the repository has."""
    names = _repo_names(repo)
    problems = []
    for m in BARE_MODULE.finditer(markdown):
        if m.group("name") not in names:
            line = markdown.count("\n", 0, m.start()) + 1
            problems.append(f"line {line}: `{m.group('name')}` is no file in the repository")
    return problems


MD_LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?:#[^)]*)?\)")


def readme_problems(repo: Path = REPO) -> list[str]:
    """The README is no page of the site, so the build checks it here: its links to files, its commands, its
    paths and its example markers."""
    text = (repo / "README.md").read_text(encoding="utf-8")
    problems = [
        f"line {text.count(chr(10), 0, m.start()) + 1}: link to {m.group('target')}, which is not in the repository"
        for m in MD_LINK.finditer(text)
        if "://" not in m.group("target") and not (repo / m.group("target")).exists()
    ]
    problems += command_problems(text) + path_problems(text, repo) + module_problems(text, repo) + import_problems(text)
    return problems + example_marker_problems(text)


# `from specdec_eval.workers.config import ...` in a page (Python blocks, shell one-liners, prose).
IMPORTED = re.compile(r"\b(?:from|import)\s+(?P<module>specdec_eval(?:\.\w+)+)")


def import_problems(markdown: str) -> list[str]:
    """Modules a page imports that the package does not have (a module moved by a refactor)."""
    import importlib.util

    problems = []
    for m in IMPORTED.finditer(markdown):
        try:
            found = importlib.util.find_spec(m.group("module")) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            line = markdown.count("\n", 0, m.start()) + 1
            problems.append(f"line {line}: imports {m.group('module')}, which the package does not have")
    return problems
