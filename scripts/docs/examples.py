"""Run the docs' examples, and refresh the output shown under them from what they print.

An example is a shell block with a marker right above it:

    <!-- example: ci -->             CI runs it (tests/docs/test_examples.py), on the tiny model
    <!-- example: needs WHAT -->     it needs what CI has not (a GPU, a server, the real model for minutes)

An `<!-- output -->` line right below an example's block, followed by a ```text block, is that example's output:

    python scripts/docs/examples.py list              # every example, and where it runs
    python scripts/docs/examples.py refresh           # rerun the CI examples, rewrite their output blocks
    python scripts/docs/examples.py refresh --all     # also the `needs` ones that show output (README: make run)

A page's examples run in order in one scratch folder (a later one may read the runs an earlier one wrote), with the
project's venv first on PATH and `examples/` linked in; the README's run in the repository root (`make run`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checks import FENCE, MARKER, PROG, SHELL_LANGS, invocations, logical_lines  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUTPUT_MARK = "<!-- output -->"
SCRUB = re.compile(r"/tmp/docs-example-[\w]+/")  # the scratch folder, out of the shown output


@dataclass(frozen=True)
class Example:
    page: Path
    start: int  # offset of the block in the page
    end: int
    marker: str
    body: str
    output_span: tuple[int, int] | None  # offsets of the output block's body, if the page shows one

    @property
    def in_ci(self) -> bool:
        return self.marker == "ci" or self.marker.startswith("ci ")

    @property
    def expected_status(self) -> int:
        m = re.search(r"exit (\d+)", self.marker)
        return int(m.group(1)) if m else 0


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def examples(page: Path) -> list[Example]:
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        if m.group("lang").lower() not in SHELL_LANGS:
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        if not marker:
            continue
        output_span = None
        after = text[m.end() :]
        if after.lstrip("\n").startswith(OUTPUT_MARK):
            out = FENCE.search(after)
            if out is not None:
                output_span = (m.end() + out.start("body"), m.end() + out.end("body"))
        found.append(Example(page, m.start(), m.end(), marker.group("what"), m.group("body"), output_span))
    return found


def run_in(example: Example, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """One example's block as a bash script in `cwd`. Its stdout is what the page shows (progress lines go to
    stderr, which a failure prints)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update({"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"})
    script = "set -eo pipefail\n" + example.body
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def scratch() -> Path:
    """A scratch folder laid out like the repository root for the examples' relative paths."""
    folder = Path(tempfile.mkdtemp(prefix="docs-example-"))
    (folder / "examples").symlink_to(REPO / "examples")
    data = REPO.parent / "shared" / "data"
    if data.exists():
        (folder / "data").symlink_to(data)
    return folder


def refresh(include_needs: bool) -> int:
    failures = 0
    for page in pages():
        # `needs` examples only where the page shows their output: the others would run for nothing
        chosen = [e for e in examples(page) if e.in_ci or (include_needs and e.output_span is not None)]
        if not chosen:
            continue
        # The README's commands are written for the repository root (`make run`); the pages' for any folder.
        cwd, text = (REPO if page.name == "README.md" else scratch()), page.read_text()
        for example in chosen:  # in page order; outputs rewritten from the last, so earlier offsets hold
            done = run_in(example, cwd)
            status = "ok" if done.returncode == example.expected_status else f"exit {done.returncode}"
            print(f"{page.relative_to(REPO)}: {example.body.splitlines()[0][:70]} ... {status}", file=sys.stderr)
            failures += status != "ok"
            if status != "ok":
                print(done.stderr[-3000:], file=sys.stderr)
            example.__dict__["printed"] = SCRUB.sub("", done.stdout)
        for example in reversed(chosen):
            if example.output_span is not None:
                start, end = example.output_span
                text = text[:start] + example.__dict__["printed"].rstrip("\n") + "\n" + text[end:]
        page.write_text(text)
    return 1 if failures else 0


def main() -> int:
    if sys.argv[1:2] == ["list"]:
        shown = [e for page in pages() for e in examples(page)]
        for e in shown:
            where = "ci" if e.in_ci else e.marker
            print(f"{e.page.relative_to(REPO)}: [{where}] {e.body.splitlines()[0][:80]}")
        print(f"{sum(e.in_ci for e in shown)} of {len(shown)} examples run in CI", end="")
        commands = [(e.in_ci, line) for e in shown for line in logical_lines(e.body) if invocations(line)]
        print(f"; of the {len(commands)} {PROG} commands in them, {sum(ci for ci, _ in commands)} run in CI")
        return 0
    if sys.argv[1:2] == ["refresh"]:
        return refresh("--all" in sys.argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
