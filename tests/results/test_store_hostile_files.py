"""Hand-edited and damaged files: a UTF-8 BOM in waives.txt; `report` never writes over a run's files; `compare` on a
run that lost its samples or holds a string score; `runs` survives a manifest's "started" of 1e20; `waives` and
`runs` never print a hand-edited file's escape sequences raw."""

from __future__ import annotations

from specdec_eval.results.printable import printable
from specdec_eval.results.waives import WaivesFile

from ..cli_helpers import run_cli
from .test_runs_table import make_run

BOM = "\ufeff"
SAMPLES = [
    {
        "task": "gsm8k",
        "doc_id": i,
        "prompt_hash": f"h{i}",
        "correct[flexible-extract]": i % 2 == 0,
        "correct[strict-match]": i % 2 == 0,
        "output_token_ids": [1, i],
    }
    for i in range(4)
]


def _bom_file(tmp_path):
    path = tmp_path / "waives.txt"
    path.write_bytes(f"{BOM}z/test.py::test_z SKIP (b1)\nz/test.py::test_zz SKIP (b2)\n".encode())
    return path


def test_waive_keeps_the_bom_on_top_and_unwaive_matches_under_it(tmp_path, capsys):
    path = _bom_file(tmp_path)
    code, out, _ = run_cli(capsys, "waive", "a/test.py::test_a", "--bug", "b", "-f", str(path))
    assert code == 0 and out.strip().endswith(":1: a/test.py::test_a SKIP (b)")  # no U+FEFF printed either
    text = path.read_bytes().decode()
    assert text == f"{BOM}a/test.py::test_a SKIP (b)\nz/test.py::test_z SKIP (b1)\nz/test.py::test_zz SKIP (b2)\n"
    assert [e.test_ids for e in WaivesFile.read(path).entries] == [
        ["a/test.py::test_a"],
        ["z/test.py::test_z"],
        ["z/test.py::test_zz"],
    ]
    code, _, err = run_cli(capsys, "unwaive", "z/test.py::test_z", "-f", str(path))
    assert code == 0, err
    code, _, _ = run_cli(capsys, "unwaive", "a/test.py::test_a", "-f", str(path))  # the first line, with the mark
    assert code == 0 and path.read_bytes().decode() == f"{BOM}z/test.py::test_zz SKIP (b2)\n"


def test_waives_reports_a_bom(tmp_path, capsys):
    path = _bom_file(tmp_path)
    code, out, err = run_cli(capsys, "waives", "-f", str(path))
    assert code == 1 and "z/test.py::test_z  b1" in out and BOM not in out
    assert (
        err.strip() == f"{path}: line 1: starts with a UTF-8 byte-order mark (U+FEFF): specdec-eval skips it, "
        "but a reader that does not would take it as part of the first test id; save the file "
        "as UTF-8 without BOM"
    )
    inside = WaivesFile.parse(f"a/t.py::t SKIP\n{BOM}b/t.py::t SKIP\n")
    assert inside.entries[1].test_ids == ["b/t.py::t"] and "line 2: starts with U+FEFF" in inside.validate()[0]


def test_escape_sequences_from_hand_edited_files_are_shown_escaped(tmp_path, capsys):
    assert printable("a\x1b[2Jb\u202ec\x07") == "a\\x1b[2Jb\\u202ec\\x07" and printable("plain ü ✓") == "plain ü ✓"
    waives = tmp_path / "waives.txt"
    waives.write_text("a/t.py::t SKIP (\x1b]8;;http://x\x07link\x1b[2J)\n")
    code, out, err = run_cli(capsys, "waives", "-f", str(waives))
    assert code == 0 and "\x1b" not in out + err and "\\x1b]8;;http://x\\x07link\\x1b[2J" in out
    make_run(tmp_path / "runs", 1, test_id="a/t.py::t[\x1b[31mred\x1b[0m]")
    code, out, err = run_cli(capsys, "runs", "--out", str(tmp_path / "runs"))
    assert code == 0 and "\x1b" not in out + err and "a/t.py::t[\\x1b[31mred\\x1b[0m]" in out


def test_runs_survives_a_manifest_started_1e20(tmp_path, capsys):
    root = tmp_path / "runs"
    good = make_run(root, 1)
    bad = make_run(root, 2)
    manifest = bad.manifest()
    bad.write_manifest({**manifest, "started": 1e20})
    code, out, err = run_cli(capsys, "runs", "--out", str(root))
    assert code == 0 and good.run_id in out and bad.run_id not in out
    assert err.strip() == f"warning: cannot read run {bad.path}: manifest.json: 'started' is '1e+20', not a time"
    code, out, _ = run_cli(capsys, "runs", "--out", str(root), "--json")
    assert code == 0 and "\"reason\": \"manifest.json: 'started' is '1e+20', not a time\"" in out


def test_compare_refuses_a_run_without_samples_or_with_a_string_score(tmp_path, capsys):
    root = tmp_path / "runs"
    a = make_run(root, 1, samples=SAMPLES)
    b = make_run(root, 2, samples=SAMPLES)
    (b.path / "samples.parquet").unlink()
    code, out, err = run_cli(capsys, "compare", str(a.path), str(b.path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"run B ({b.run_id}) has no samples.parquet (lost or deleted)" in err
    c = make_run(root, 3, samples=SAMPLES[:0] + [{**SAMPLES[0], "task": "other"}])
    code, _, err = run_cli(capsys, "compare", str(a.path), str(c.path))
    assert code == 2 and "summary counts 10 gsm8k samples but samples.parquet holds none of them" in err
    d = make_run(root, 4, samples=SAMPLES, tasks={"gsm8k": {"score": "abc", "threshold": 40.0, "verdict": "PASS"}})
    code, _, err = run_cli(capsys, "compare", str(a.path), str(d.path))
    assert code == 2 and "tasks.gsm8k.score is 'abc', not a number" in err and len(err.strip().splitlines()) == 1


def test_report_never_writes_into_a_run_folder(tmp_path, capsys):
    run = make_run(tmp_path / "runs", 1, samples=SAMPLES)
    before = {p.name: p.read_bytes() for p in run.path.iterdir() if p.is_file()}
    for option, target in (
        ("--out", run.path / "manifest.json"),
        ("--markdown", run.path / "samples.parquet"),
        ("--out", run.path / "partial" / "x.html"),
    ):
        other = "--markdown" if option == "--out" else "--out"  # the other file: refused before it is written
        code, out, err = run_cli(
            capsys, "report", str(run.path), option, str(target), other, str(tmp_path / "elsewhere.x")
        )
        assert code == 2 and err.strip() == (
            f"specdec-eval: error: {option} {target}: that is inside run folder {run.path}; write the report elsewhere"
        )
    assert {p.name: p.read_bytes() for p in run.path.iterdir() if p.is_file()} == before
    assert not (tmp_path / "elsewhere.x").exists()
    site = tmp_path / "web"  # a folder with a manifest.json that is no run: a report may go there
    site.mkdir()
    (site / "manifest.json").write_text("{}")
    code, _, err = run_cli(capsys, "report", str(run.path), "-o", str(site / "report.html"))
    assert code == 0 and (site / "report.html").exists(), err
