"""Issue 27's cases of scripts/probe.py (trust: no secret on disk, no verdict from a tainted reference, the report
as the gate decided, nothing left behind), and the fixture files they read. Kept apart from probe_cases.py so that
other blocks of cases merge without touching this one; probe_cases.cli_cases() and make_fixtures() include it.

Besides the usual user errors (exit 2, one line, nothing written), some cases run a command that must succeed or
leave a record, and then look at what it left (Case.setup / check / keep), and one sends SIGTERM to `ab` midway
(Case.signal_when) and checks that nothing outlives it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from probe_cases import ERROR, FAST, SMOKE, TEST_ID, Case

PLAIN_TEST = "accuracy/test_specdec.py::TestSmolLM2_135M::test_auto_dtype[v2_kv_cache-tp1]"
SECRET_PASSWORD, SECRET_KEY = "SECRET-pw-27", "SECRET-key-27"
BOM = "\ufeff".encode()
# Fixture files the cases only read: they must be byte for byte the same afterwards.
WATCHED = ("acc_refs", "waives_bom", "waives_esc", "trust_stores")
RUN_OK, RUN_NO_SAMPLES, RUN_STRING_SCORE = (
    "20300101-000001-aaaaaaaaaaaa",
    "20300101-000002-bbbbbbbbbbbb",
    "20300101-000003-cccccccccccc",
)
RUN_1E20, RUN_ESC, RUN_PLAIN, RUN_BAND = (
    "20300101-000004-dddddddddddd",
    "20300101-000005-eeeeeeeeeeee",
    "20300101-000006-ffffffffffff",
    "20300101-000007-aaaaaaaaaaab",
)


def trust_cases() -> list[Case]:
    run = ["run", *SMOKE, "--out", "runs"]
    endpoint = [
        "run",
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--no-reference",
        "--limit",
        "1",
        "--max-output-len",
        "4",
        "--served-model",
        "m",
        "--request-retries",
        "0",
        "--out",
        "runs",
    ]
    spec = [*run, "--spec", "eagle3"]
    recorded = dict(expect=1, prefix="", multiline=True, keep=True)  # a run whose requests fail: exit 1, a record
    listing = dict(expect=0, prefix="", multiline=True)
    ab_run = [
        "--model",
        "tiny",
        "--tasks",
        "gsm8k_smoke",
        "--no-reference",
        "--limit",
        "4",
        "--max-output-len",
        "64",
        "--device-memory",
        "256MiB",
    ]
    # fmt: off
    return [
        # 1. secrets never reach what a run records
        Case("trust-url-password-not-recorded",
             [*endpoint, "--endpoint", f"http://probe-user:{SECRET_PASSWORD}@127.0.0.1:9/v1"],
             check=_no_secret(SECRET_PASSWORD, "probe-user"), **recorded),
        Case("trust-api-key-not-recorded", [*endpoint, "--endpoint", "http://127.0.0.1:9/v1", "--api-key", SECRET_KEY],
             check=_no_secret(SECRET_KEY), **recorded),
        # 4. a reference only from a clean, passing run, saying what it rests on; its file checked before the run
        Case("trust-populate-refused-with-inject",
             [*spec, "--inject", "emit_rejected_draft", "--populate-acceptance", "--acceptance-refs", "{acc_refs}"],
             message="leave out --inject"),
        Case("trust-populate-says-documents", [*spec, "--populate-acceptance", "--acceptance-refs", "refs.yaml"],
             expect=0, prefix="", multiline=True, keep=True, check=_populated),
        Case("trust-acceptance-refs-a-folder", [*spec, "--acceptance-refs", "{store}"], message="is a folder"),
        Case("trust-acceptance-refs-read-only",
             [*spec, "--populate-acceptance", "--acceptance-refs", "/proc/sys/specdec-acceptance.yaml"],
             message="not writable"),
        Case("trust-acceptance-refs-bad-yaml", [*spec, "--acceptance-refs", "{bad_yaml}"],
             message="not valid YAML (expected ',' or ']'"),
        # 7. a UTF-8 byte-order mark in waives.txt
        Case("trust-waives-reports-bom", ["waives", "-f", "{waives_bom}"], expect=1, prefix="",
             message="byte-order mark"),
        Case("trust-waive-keeps-bom-on-top", ["waive", "a/test.py::test_a", "--bug", "b", "-f", "waives.txt"],
             setup=_bom_waives, check=_bom_on_top(added="a/test.py::test_a"), expect=0, prefix="", keep=True),
        Case("trust-unwaive-under-bom", ["unwaive", "z/test.py::test_z", "-f", "waives.txt"], setup=_bom_waives,
             check=_bom_on_top(removed="z/test.py::test_z"), expect=0, prefix="", keep=True),
        # 8. a report never writes over a run's files
        Case("trust-report-over-manifest", ["report", "{run_ok}", "-o", "{run_ok}/manifest.json"],
             message="inside run folder"),
        Case("trust-report-markdown-over-samples", ["report", "{run_ok}", "--markdown", "{run_ok}/samples.parquet"],
             message="inside run folder"),
        # 9. and tracebacks: compare on what cannot be compared
        Case("trust-compare-lost-samples", ["compare", "{run_ok}", "{run_no_samples}"],
             message="no samples.parquet"),
        Case("trust-compare-string-score", ["compare", "{run_ok}", "{run_string_score}"], message="not a number"),
        Case("trust-runs-started-1e20", ["runs", "--out", "{store_1e20}"], expect=0, prefix="warning: cannot read run",
             message="'started' is '1e+20', not a time", check=_lists(RUN_OK)),
        Case("trust-run-memory-1e400", [*run, "--device-memory", "1e400GiB"], message="beyond any machine"),
        Case("trust-serve-request-bytes-1e400", ["serve", *FAST, "--max-request-bytes", "1e400GiB"],
             message="beyond any machine"),
        Case("trust-ab-alpha-5", ["ab", "HEAD", "HEAD", "--repo", "{store}", "--alpha", "5", "--", *SMOKE],
             message="--alpha must be between 0 and 1"),
        Case("trust-generate-lone-surrogate", ["generate", "{prompts_surrogate}", *FAST], message="lone surrogate"),
        Case("trust-generate-missing-prompts", ["generate", "{missing}", *FAST], message="prompts file not found"),
        # leaks: a signal to ab, escape sequences from hand-edited files, run folders of refused runs
        Case("trust-ab-sigterm", ["ab", "HEAD", "HEAD", "--repo", "{ab_repo}", "--out", "runs", "--", *ab_run],
             expect=143, prefix=f"{ERROR.split(':')[0]}: ab terminated by SIGTERM", multiline=True, keep=True,
             setup=lambda scratch: (scratch / "tmp").mkdir(), env={"TMPDIR": "{scratch}/tmp"},
             signal_when="side A:", check=_nothing_outlives_ab),
        Case("trust-waives-escapes", ["waives", "-f", "{waives_esc}"], check=_escaped, **listing),
        Case("trust-runs-escapes", ["runs", "--out", "{store_esc}"], check=_escaped, **listing),
        Case("trust-run-sample-bogus", [*run, "--sample", "bogus"], message="--sample"),
        Case("trust-run-no-reference-leaves-nothing",
             ["run", *FAST, "--tasks", "gsm8k", "--data-dir", "{gsm8k_ok}", "--limit", "1", "--out", "runs"],
             message="no gsm8k reference"),
        # the report states the band the gate used; a run no gate could fail is NO-GATE everywhere
        Case("trust-report-band-as-gated", ["report", "{run_band}", "-o", "r.html", "--markdown", "r.md"],
             check=_band_as_gated, keep=True, **listing),
        Case("trust-report-no-gate", ["report", "{run_plain}", "-o", "r.html"], check=_no_gate_report, keep=True,
             **listing),
        Case("trust-runs-no-gate", ["runs", "--out", "{store_plain}"], check=_no_gate_row, **listing),
        Case("trust-decide-no-gate", ["decide", PLAIN_TEST, "--out", "{store_plain}", "--waives", "{waives_bom}"],
             check=_no_gate_decision, **listing),
    ]
    # fmt: on


# --- checks -------------------------------------------------------------------------------------------------------


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def _no_secret(*secrets: str):
    def check(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
        problems = []
        manifests = list(scratch.glob("runs/*/manifest.json"))
        if not manifests:
            problems.append("no run was recorded")
        for path in _files(scratch):
            data = path.read_bytes()
            problems += [f"{path.relative_to(scratch)} holds {s!r}" for s in secrets if s.encode() in data]
        problems += [f"the output holds {s!r}" for s in secrets if s in out + err]
        return problems

    return check


def _populated(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    line = next((x for x in out.splitlines() if x.startswith("acceptance reference written:")), "")
    problems = [] if "from 1 gsm8k_smoke documents (" in line else [f"no documents count in {line!r}"]
    refs = scratch / "refs.yaml"
    if not refs.exists() or "ref_al:" not in refs.read_text():
        problems.append("refs.yaml holds no reference")
    return problems


def _bom_waives(scratch: Path) -> None:
    (scratch / "waives.txt").write_bytes(BOM + b"z/test.py::test_z SKIP (b1)\nz/test.py::test_zz SKIP (b2)\n")


def _bom_on_top(added: str | None = None, removed: str | None = None):
    def check(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
        data = (scratch / "waives.txt").read_bytes()
        problems = [] if data.startswith(BOM) and data.count(BOM) == 1 else ["the BOM is not (only) at the top"]
        text = data.decode("utf-8").removeprefix("\ufeff")
        if added and not text.startswith(added):
            problems.append(f"{added} is not the first line")
        if removed and f"{removed} " in text:
            problems.append(f"{removed} is still waived")
        return problems

    return check


def _lists(run_id: str):
    def check(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
        return [] if run_id in out else [f"{run_id} is not listed"]

    return check


def _escaped(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    problems = ["an ESC character reached the terminal"] if "\x1b" in out + err else []
    return problems + ([] if "\\x1b" in out else ["the escape sequence is not shown escaped"])


def _nothing_outlives_ab(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    problems = []
    trees = subprocess.run(["git", "-C", fx["ab_repo"], "worktree", "list"], capture_output=True, text=True).stdout
    if len(trees.strip().splitlines()) != 1:
        problems.append(f"worktrees still registered: {trees.strip()!r}")
    left = _files(scratch / "tmp") + [p for p in (scratch / "tmp").iterdir() if p.is_dir()]
    if left:
        problems.append(f"left in the temporary folder: {', '.join(str(p.name) for p in left[:3])}")
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(scratch).encode() in cmdline and b"specdec_eval.cli.main" in cmdline:
            problems.append(f"side process {pid} still running")
    return problems


def _band_as_gated(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    """The Markdown states the band the gate wrote into the summary, and the AL lies in it."""
    gate = json.loads((Path(fx["run_band"]) / "summary.json").read_text())["tasks"]["gsm8k"]["acceptance_gate"]
    low, high = gate["band"]["low"], gate["band"]["high"]
    band = f"AL {gate['acceptance_length']:.3f} within \\[{low:.3f}, {high:.3f}\\]"
    problems = [] if band in (scratch / "r.md").read_text() else [f"the report lacks {band!r}"]
    return problems + ([] if low <= gate["acceptance_length"] <= high else ["the fixture's AL is outside its band"])


def _no_gate_report(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    html = (scratch / "r.html").read_text()
    return [] if "NO-GATE (no gate could fail" in html and "PASS (no gate" not in html else ["not NO-GATE"]


def _no_gate_row(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    row = next((x for x in out.splitlines() if x.startswith(RUN_PLAIN)), "")
    return [] if "NO-GATE" in row and "PASS" not in row.split()[-2:] else [f"the row is {row!r}"]


def _no_gate_decision(scratch: Path, out: str, err: str, fx: dict[str, str]) -> list[str]:
    evidence = [x for x in out.splitlines() if RUN_PLAIN in x]
    return [] if evidence and all("NO-GATE" in x and " PASS " not in x for x in evidence) else [f"said {out!r}"]


# --- fixtures -----------------------------------------------------------------------------------------------------


def trust_fixtures(folder: Path) -> dict[str, str]:
    """Issue 27's fixture files under folder; names for the {placeholders} of trust_cases()."""
    from probe_cases import _gsm8k, _write

    stores = folder / "stores"
    fx = {
        "acc_refs": str(_write(folder / "acceptance.yaml", f"{TEST_ID}:\n  ref_al: 1.999\n  min_al: 1.899\n")),
        "bad_yaml": str(_write(folder / "bad.yaml", "a:\n  b: [1, 2\n  c: 3\n")),
        "gsm8k_ok": _gsm8k(folder / "g-ok", json.dumps({"question": "1+1?", "answer": "2\n#### 2"}) + "\n"),
        "prompts_surrogate": str(_write(folder / "surrogate.jsonl", '{"prompt": "half \\ud800 a character"}\n')),
        "waives_bom": str(_write(folder / "waives-bom.txt", BOM + b"a/t.py::t SKIP (b)\n")),
        "waives_esc": str(_write(folder / "waives-esc.txt", "a/t.py::t SKIP (\x1b[2J\x1b]8;;http://x\x07b)\n")),
        "trust_stores": str(stores),
        "store_1e20": str(stores / "s-1e20"),
        "store_esc": str(stores / "s-esc"),
        "store_plain": str(stores / "s-plain"),
        "ab_repo": str(_git_repo(folder / "ab-repo")),
    }
    main = stores / "s-main"
    fx["run_ok"] = str(_run(main, RUN_OK))
    fx["run_no_samples"] = str(_run(main, RUN_NO_SAMPLES, samples=False))
    fx["run_string_score"] = str(_run(main, RUN_STRING_SCORE, score="abc"))
    fx["run_band"] = str(_run(main, RUN_BAND, band=True))
    _run(Path(fx["store_1e20"]), RUN_OK)
    _run(Path(fx["store_1e20"]), RUN_1E20, started=1e20)
    _run(Path(fx["store_esc"]), RUN_ESC, test_id="a/t.py::t[\x1b[31mred\x1b[0m]")
    fx["run_plain"] = str(_run(Path(fx["store_plain"]), RUN_PLAIN, test_id=PLAIN_TEST, plain=True))
    return fx


def _run(
    store: Path,
    run_id: str,
    *,
    samples: bool = True,
    score: object = 50.0,
    started: float = 1.9e9,
    test_id: str = TEST_ID,
    plain: bool = False,
    band: bool = False,
) -> Path:
    """A finished run folder written with the run store's own writers: gsm8k, 4 samples."""
    from specdec_eval.results.sample_record import SampleRecord
    from specdec_eval.results.store import Run

    run = Run(store / run_id)
    run.path.mkdir(parents=True)
    spec = None if plain else {"algorithm": "eagle3", "max_draft_len": 3}
    run.write_manifest(
        {
            "run_id": run_id,
            "config_key": run_id[-12:],
            "test_id": test_id,
            "started": started,
            "config": {"engine": {"model": "smollm2", "device": "cpu", "spec": spec}},
            "devices": {"host": "probe"},
            "world_size": 1,
            "commit": None,
            "dirty": None,
        }
    )
    if samples:
        run.write_samples(
            [
                SampleRecord(
                    "gsm8k",
                    i,
                    prompt_hash=f"h{i}",
                    output_token_ids=[1, 2, i],
                    correct={"strict-match": i % 2 == 0, "flexible-extract": i % 2 == 0},
                )
                for i in range(4)
            ]
        )
    task = {
        "num_samples": 4,
        "score": score,
        "filter_scores": {"strict-match": 50.0, "flexible-extract": 50.0},
        "reference": None if plain else 55.0,
        "threshold": None if plain else 40.0,
        "theta": None,
        "verdict": "REPORT" if plain else "PASS",
        "num_failed_requests": 0,
        "acceptance": None,
        "data": "probe",
    }
    if band:
        task["acceptance_gate"] = _gate_with_slack()
    run.write_summary(
        {
            "verdict": "PASS",
            "tasks": {"gsm8k": task},
            "events": {},
            "failing_events": 0,
            "run_id": run_id,
            "elapsed_s": 1.0,
        }
    )
    return run.path


def _gate_with_slack() -> dict:
    """The issue's figures: AL 2.137 on a small run against ref_al 1.999, passed within the run's sampling slack
    (the band +- 14%, not the +- 5% of rtol alone), computed by the gate itself."""
    from specdec_eval.evals.gates.acceptance import acceptance_gate

    stats = {"num_cycles": 1000, "num_accepted_drafts": 1137, "accepted_per_position": [], "max_draft_len": 3}
    refs = {TEST_ID: {"ref_al": 1.999, "min_al": 1.899, "max_draft_len": 3}}
    return acceptance_gate(TEST_ID, stats, refs, 0.05, slack=0.28)


def _git_repo(path: Path) -> Path:
    """A one-commit repository with a package pip installs in a second: what `ab` checks out and installs per side
    (the sides then run this checkout's specdec-eval, which is on the path anyway)."""
    from probe_cases import _write

    _write(
        path / "pyproject.toml",
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
        '"setuptools.build_meta"\n[project]\nname = "probe-ab"\nversion = "0"\n[tool.setuptools]\n'
        'py-modules = ["probe_ab"]\n',
    )
    _write(path / "probe_ab.py", "X = 1\n")
    git = ["git", "-C", str(path), "-c", "user.name=probe", "-c", "user.email=probe@example.com"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "probe"], check=True)
    return path
