"""The bug-class matrix of `selftest --mutants` as a table, and the clean
matrix of `selftest --clean`."""

from __future__ import annotations

from typing import Any

from ..gates.acceptance import GATE as ACCEPTANCE
from ..gates.lossless import GATE as LOSSLESS
from ..results.run_summary import Verdict


def cell_text(cell: dict[str, Any], clean: bool) -> str:
    """FAIL: where and when it was caught; PASS: MISSED for a bug (PASS for the unmutated engine); "-": the gate
    could not decide in this run."""
    if cell["verdict"] == Verdict.FAIL and clean:
        return f"FALSE FAIL at doc {cell['doc']}"
    if cell["verdict"] == Verdict.FAIL:
        return f"caught at doc {cell['doc']} after {cell['seconds']:.0f} s"
    if cell["verdict"] == Verdict.PASS:
        return "PASS" if clean else "MISSED"
    return "-"


def print_matrix(report: dict[str, Any]) -> None:
    gates = report["gates"]
    rows = report["rows"]
    table = [["bug class", *gates, "result"]]
    for row in rows:
        clean = row["catcher"] is None
        cells = [cell_text(row["cells"][g], clean) + ("*" if g == row["catcher"] else "") for g in gates]
        result = f"{row['result']} ({row['elapsed_s']:.0f} s, {row['documents']} of {row['of']} docs)"
        table.append([row["class"], *cells, result])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(text.ljust(w) for text, w in zip(r, widths, strict=True)).rstrip())
    print(
        "\n* the gate that must catch the class: lossless for a class that changes outputs (acceptance catching "
        "it is luck),\n  events for one that changes none, paired_acceptance for one that only makes the drafter "
        "worse (its\n  per-document acceptance against the unmutated run's); '-': the gate could not decide in "
        "this run (no\n  reference, no baseline, too few documents)"
    )
    for row in rows:
        if row["catcher"] == "paired_acceptance":
            power = row["cells"][ACCEPTANCE.name].get("power")
            seen = row["cells"]["paired_acceptance"].get("reason")
            print(
                f"{row['class']}: the single-run acceptance gate "
                f"{'at this n: ' + power if power else 'could not decide'}"
                + (f"\n  paired with the unmutated run: {seen}" if seen else "")
            )
    for row in rows:
        if row["never_fired"]:
            print(f"warning: {row['class']}: injected {', '.join(row['never_fired'])} never fired")
    missed = [r["class"] for r in rows if r["result"] in ("MISSED", "FALSE FAIL")]
    verdict = "PASSED" if report["ok"] else "FAILED"
    detail = f"{len(rows)} runs on {report['model']}, {report['limit']} documents each"
    print(f"\nselftest --mutants {verdict}: {detail}" + (f"; not as expected: {', '.join(missed)}" if missed else ""))


def print_clean(report: dict[str, Any]) -> None:
    """The clean matrix of `selftest --clean`: one line per row, then the false-FAIL count."""
    table = [["row", LOSSLESS.name, "exit", "result", "seconds"]]
    for row in report["rows"]:
        table.append(
            [row["row"], row[LOSSLESS.name], str(row.get("exit", "-")), row["result"], f"{row['elapsed_s']:.0f}"]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    for row in report["rows"]:
        if row.get("reason"):
            print(f"- {row['row']}: {row['reason']}")
    print(
        f"\nclean matrix: {report['false_fails']} false FAIL(s), {report['errors']} error(s) in {len(report['rows'])} "
        "unmutated runs"
    )
