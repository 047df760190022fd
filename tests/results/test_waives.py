"""waives.txt in TensorRT-LLM's format: parsing every kind of line, byte-exact round trips, minimal edits."""

from __future__ import annotations

import difflib
import json

import pytest
import typer
from specdec_eval.cli.waives import unwaive, waive, waives_check
from specdec_eval.results.waives import WaiveEntry, WaivesFile
from typer.testing import CliRunner

from specdec_eval.errors import UserError

EAGLE = (
    "accuracy/test_llm_api_pytorch.py::TestGPTOSS::test_eagle3_4gpus[v2_kv_cache-cutlass-one_model-overlap_scheduler]"
)
PERF = "perf/test_perf.py::test_perf[flan_t5_base-bench-float16-input_output_len:128,20]"
MODELS = 'unittest/llmapi/test_llm_models.py -m "not (part0 or part1)"'

# Line numbers in comments; the last line has no line ending.
FIXTURE = (
    "# Waived tests: one per line, see tests/README.md\n"  # 1
    "\n"  # 2
    "accuracy/test_a.py::test_plain SKIP\n"  # 3
    "accuracy/test_a.py::test_hash SKIP # (https://nvbugs/111)\n"  # 4
    "accuracy/test_a.py::test_text SKIP (free-text reason with spaces, commas: and (nested) parens)\n"  # 5
    "accuracy/test_b.py::test_one accuracy/test_b.py::test_two accuracy/test_b.py::test_three"  # 6
    " XFAIL (https://nvbugs/2)\n"
    f"full:sm100/{MODELS} SKIP (Disable for Blackwell OOM)\n"  # 7
    'unittest/_torch -k "partition0" SKIP (reason)\n'  # 8
    "unittest/_torch/speculative/ SKIP (x)\n"  # 9
    f"{PERF} SKIP\n"  # 10
    f"full:RTXPro6000D/{EAGLE} SKIP (https://nvbugs/5945047)\n"  # 11
    "   # an indented comment\n"  # 12
    "accuracy/test_c.py::test_slow TIMEOUT (90)\n"  # 13
    "accuracy/test_c.py::test_flaky UNSTABLE (https://nvbugs/3)\n"  # 14
    "accuracy/test_c.py::test_alone ISOLATION\n"  # 15
    "accuracy/test_d.py::test_gpu SKIP (https://nvbugs/4)\n"  # 16
    "full:H100/accuracy/test_d.py::test_gpu SKIP (https://nvbugs/5)\n"  # 17
    "accuracy/test_e.py::test_apostrophe SKIP (doesn't fit; see #12)\n"  # 18
    "\n"  # 19
    "accuracy/test_z.py::test_last SKIP (https://nvbugs/6)"  # 20
)


def changed_lines(before: str, after: str) -> list[str]:
    """The +/- lines of a diff, line endings kept (so a changed ending shows)."""
    diff = difflib.ndiff(before.splitlines(keepends=True), after.splitlines(keepends=True))
    return [d for d in diff if d[:1] in "+-"]


def only(entries: list[WaiveEntry], line_no: int) -> WaiveEntry:
    [entry] = [e for e in entries if e.line_no == line_no]
    return entry


@pytest.mark.parametrize("text", [FIXTURE, FIXTURE.replace("\n", "\r\n"), FIXTURE + "\n", "", "\n", "x SKIP"])
def test_round_trip_is_byte_identical(tmp_path, text):
    assert WaivesFile.parse(text).render() == text
    path = tmp_path / "waives.txt"
    path.write_bytes(text.encode() + b"\n# \xff not utf-8\r\n")
    waives = WaivesFile.read(path)
    waives.write(tmp_path / "copy.txt")
    assert (tmp_path / "copy.txt").read_bytes() == path.read_bytes()


def test_parses_every_kind_of_line():
    waives = WaivesFile.parse(FIXTURE)
    assert waives.invalid == [] and waives.validate() == []
    assert [e.line_no for e in waives.entries] == [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 20]
    e = waives.entries
    fields = [(x.gpu, x.test_ids, x.marker, x.reason, x.comment) for x in e]
    assert fields[0] == (None, ["accuracy/test_a.py::test_plain"], "SKIP", None, None)
    assert fields[1] == (None, ["accuracy/test_a.py::test_hash"], "SKIP", None, "(https://nvbugs/111)")
    assert fields[2][3] == "free-text reason with spaces, commas: and (nested) parens"
    assert only(e, 6).test_ids == [f"accuracy/test_b.py::test_{n}" for n in ("one", "two", "three")]
    assert (only(e, 6).marker, only(e, 6).reason) == ("XFAIL", "https://nvbugs/2")
    assert fields[4] == ("sm100", [MODELS], "SKIP", "Disable for Blackwell OOM", None)
    assert only(e, 8).test_ids == ['unittest/_torch -k "partition0"']
    assert only(e, 9).test_ids == ["unittest/_torch/speculative/"]
    assert (only(e, 10).test_ids, only(e, 10).reason) == ([PERF], None)
    assert fields[8] == ("RTXPro6000D", [EAGLE], "SKIP", "https://nvbugs/5945047", None)
    assert (only(e, 13).marker, only(e, 13).timeout_minutes) == ("TIMEOUT", 90)
    assert [only(e, n).marker for n in (14, 15)] == ["UNSTABLE", "ISOLATION"]
    assert only(e, 18).reason == "doesn't fit; see #12"  # a '#' inside the reason is not a comment
    assert only(e, 20).raw == "accuracy/test_z.py::test_last SKIP (https://nvbugs/6)"
    assert only(e, 3).raw == "accuracy/test_a.py::test_plain SKIP\n"


def test_crlf_lines_parse_like_lf_lines():
    lf, crlf = WaivesFile.parse(FIXTURE), WaivesFile.parse(FIXTURE.replace("\n", "\r\n"))
    strip = [(x.gpu, x.test_ids, x.marker, x.reason, x.comment, x.line_no) for x in lf.entries]
    assert strip == [(x.gpu, x.test_ids, x.marker, x.reason, x.comment, x.line_no) for x in crlf.entries]
    assert only(crlf.entries, 3).raw.endswith("SKIP\r\n")


def test_find_gpu_semantics():
    waives = WaivesFile.parse(FIXTURE)
    test = "accuracy/test_d.py::test_gpu"
    assert [e.line_no for e in waives.find(test)] == [16]  # no gpu: only lines without full:
    assert [e.line_no for e in waives.find(test, gpu="H100")] == [16, 17]
    assert [e.line_no for e in waives.find(test, gpu="B200")] == [16]
    assert waives.find(EAGLE) == [] and [e.line_no for e in waives.find(EAGLE, gpu="RTXPro6000D")] == [11]
    assert [e.line_no for e in waives.find("accuracy/test_b.py::test_two")] == [6]
    assert waives.find("accuracy/test_b.py") == []  # exact ids only


def test_waive_adds_exactly_one_sorted_line():
    waives = WaivesFile.parse(FIXTURE)
    assert waives.waive("accuracy/test_c.py::test_new", "https://nvbugs/7", gpu=None) is True
    assert changed_lines(FIXTURE, waives.render()) == ["+ accuracy/test_c.py::test_new SKIP (https://nvbugs/7)\n"]
    # Before the first waive line whose full text sorts after it: line 7, 'full:sm100/...' ('f' > 'a').
    assert waives.lines[6] == "accuracy/test_c.py::test_new SKIP (https://nvbugs/7)\n"
    assert waives.find("accuracy/test_c.py::test_new")[0].line_no == 7
    assert waives.waive("accuracy/test_a.py::test_p", "r")  # ' ' sorts before 'l': ahead of test_plain
    assert waives.lines[2] == "accuracy/test_a.py::test_p SKIP (r)\n"


def test_waive_twice_is_idempotent():
    waives = WaivesFile.parse(FIXTURE)
    assert waives.waive("accuracy/test_a.py::test_plain", "https://nvbugs/8") is False  # already there
    assert waives.render() == FIXTURE
    assert waives.waive("accuracy/test_a.py::test_plain", "https://nvbugs/8", gpu="H100") is True
    once = waives.render()
    assert waives.waive("accuracy/test_a.py::test_plain", "https://nvbugs/9", gpu="H100") is False
    assert waives.render() == once and waives.validate() == []
    assert changed_lines(FIXTURE, once) == ["+ full:H100/accuracy/test_a.py::test_plain SKIP (https://nvbugs/8)\n"]


def test_waive_appends_after_a_last_line_without_newline():
    waives = WaivesFile.parse(FIXTURE)
    assert waives.waive("zz/test.py::test_after_all", "https://nvbugs/10", marker="XFAIL")
    assert waives.render() == FIXTURE + "\nzz/test.py::test_after_all XFAIL (https://nvbugs/10)"
    assert [e.line_no for e in waives.find("zz/test.py::test_after_all")] == [21]


def test_waive_uses_the_dominant_line_ending_and_checks_its_input():
    crlf = FIXTURE.replace("\n", "\r\n") + "\r\n"
    waives = WaivesFile.parse(crlf)
    waives.waive("zz/test.py::test_end", "r")
    assert waives.render() == crlf + "zz/test.py::test_end SKIP (r)\r\n"
    empty = WaivesFile.parse("")
    empty.waive('unittest/_torch -k "not slow"', "https://nvbugs/1", gpu="B200")
    assert empty.render() == 'full:B200/unittest/_torch -k "not slow" SKIP (https://nvbugs/1)\n'
    with pytest.raises(ValueError, match="unknown marker"):
        waives.waive("t", "r", marker="SKIPPED")
    with pytest.raises(ValueError, match="TIMEOUT"):
        waives.waive("t", "soon", marker="TIMEOUT")
    for bad_id in ("a # b", "a\nb", "t[unclosed x", "two ids"):
        with pytest.raises(ValueError, match="cannot write"):
            waives.waive(bad_id, "r")
    with pytest.raises(ValueError, match="unbalanced"):
        waives.waive("t", "a ( b")
    with pytest.raises(ValueError, match="GPU"):
        waives.waive("t", "r", gpu="H100/x")


def test_unwaive_single_id_line_removes_exactly_that_line():
    waives = WaivesFile.parse(FIXTURE)
    [removed] = waives.unwaive("accuracy/test_a.py::test_text")
    assert removed.line_no == 5 and removed.reason.startswith("free-text")
    assert changed_lines(FIXTURE, waives.render()) == ["- " + removed.raw]
    assert waives.unwaive("accuracy/test_a.py::test_text") == []


def test_unwaive_one_id_of_a_multi_id_line_rewrites_only_that_line():
    waives = WaivesFile.parse(FIXTURE)
    waives.unwaive("accuracy/test_b.py::test_two")
    expected = "accuracy/test_b.py::test_one accuracy/test_b.py::test_three XFAIL (https://nvbugs/2)\n"
    assert waives.lines[5] == expected
    assert changed_lines(FIXTURE, waives.render()) == ["- " + FIXTURE.splitlines(True)[5], "+ " + expected]
    waives.unwaive("accuracy/test_b.py::test_three")  # the last id: the gap before it goes
    assert waives.lines[5] == "accuracy/test_b.py::test_one XFAIL (https://nvbugs/2)\n"
    waives.unwaive("accuracy/test_b.py::test_one")
    assert "test_b.py" not in waives.render() and len(waives.lines) == 19


def test_unwaive_first_id_keeps_the_gpu_prefix_and_the_comment():
    waives = WaivesFile.parse("full:H100/a b  c SKIP (r) # note\r\n")
    waives.unwaive("a", gpu="H100")
    assert waives.render() == "full:H100/b  c SKIP (r) # note\r\n"
    waives.unwaive("c", gpu="H100")
    assert waives.render() == "full:H100/b SKIP (r) # note\r\n"


def test_unwaive_with_gpu_touches_only_that_gpu_line():
    test = "accuracy/test_d.py::test_gpu"
    waives = WaivesFile.parse(FIXTURE)
    assert waives.unwaive(test, gpu="B200") == []
    [removed] = waives.unwaive(test, gpu="H100")
    assert removed.line_no == 17
    assert changed_lines(FIXTURE, waives.render()) == ["- " + removed.raw]
    waives = WaivesFile.parse(FIXTURE)
    [removed] = waives.unwaive(test)
    assert removed.line_no == 16 and removed.gpu is None
    assert [e.gpu for e in waives.find(test, gpu="H100")] == ["H100"]


def test_validate_reports_problems_with_line_numbers():
    text = (
        "good/test.py::test_a SKIP (r)\n"
        "no/marker/here.py::test_b\n"
        "bad/marker.py::test_c SKIPPED (r)\n"
        "trailing/text.py::test_d SKIP because of a bug\n"
        "good/test.py::test_a XFAIL (dup)\n"
        "full:H100/good/test.py::test_a SKIP (not a dup: other gpu)\n"
        "timeout/test.py::test_e TIMEOUT (long)\n"
        "unbalanced/test.py::test_f SKIP (oops\n"
        "full:/nogpu.py::test_g SKIP\n"
    )
    waives = WaivesFile.parse(text)
    problems = waives.validate()
    assert [p.split(":")[0] for p in problems] == [f"line {n}" for n in (2, 3, 4, 5, 7, 8, 9)]
    assert "no marker" in problems[0] and "unknown marker 'SKIPPED'" in problems[1]
    assert "'because of a bug'" in problems[2] and "duplicate waive of 'good/test.py::test_a'" in problems[3]
    assert "first on line 1" in problems[3] and "TIMEOUT" in problems[4] and "unbalanced" in problems[5]
    assert waives.render() == text  # invalid lines survive untouched
    waives.waive("aaa/test.py::test_first", "r")
    assert waives.render() == "aaa/test.py::test_first SKIP (r)\n" + text


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="waives file not found: .*nope.txt"):
        WaivesFile.read(tmp_path / "nope.txt")


def test_write_is_atomic_and_keeps_permissions(tmp_path):
    path = tmp_path / "waives.txt"
    path.write_text("a SKIP\n")
    path.chmod(0o640)
    waives = WaivesFile.read(path)
    waives.waive("b", "r")
    waives.write()
    assert path.read_text() == "a SKIP\nb SKIP (r)\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["waives.txt"]  # no temporary file left


# --- CLI ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def cli():
    app = typer.Typer(pretty_exceptions_enable=False)
    app.command("waive")(waive)
    app.command("unwaive")(unwaive)
    app.command("waives")(waives_check)
    runner = CliRunner()
    return lambda *argv: runner.invoke(app, list(argv))


def test_cli_waive_and_unwaive(cli, tmp_path):
    path = tmp_path / "waives.txt"
    path.write_text(FIXTURE)
    test = "accuracy/test_specdec.py::TestSmolLM2_135M::test_eagle3[v2_kv_cache-one_model-tp1]"
    result = cli("waive", test, "--bug", "https://nvbugs/123", "--gpu", "H100", "-f", str(path))
    assert result.exit_code == 0, result.output
    line = f"full:H100/{test} SKIP (https://nvbugs/123)"
    assert result.stdout.startswith("waived on H100: ") and result.stdout.rstrip().endswith(line)
    assert changed_lines(FIXTURE, path.read_text()) == [f"+ {line}\n"]
    result = cli("waive", test, "--bug", "https://nvbugs/124", "--gpu", "H100", "-f", str(path))
    assert result.exit_code == 0 and result.stdout.startswith("already waived on H100")
    result = cli("unwaive", test, "-f", str(path))  # no --gpu: the full:H100 line does not match
    assert result.exit_code == 1 and "not waived on every GPU" in result.stderr and "H100" in result.stderr
    result = cli("unwaive", test, "--gpu", "H100", "-f", str(path))
    assert result.exit_code == 0 and line in result.stdout
    assert path.read_text() == FIXTURE


def test_cli_waive_creates_a_missing_file_and_rejects_bad_markers(cli, tmp_path):
    path = tmp_path / "new.txt"
    result = cli("waive", "t.py::test_x", "--bug", "flaky", "--marker", "xfail", "-f", str(path))
    assert result.exit_code == 0 and path.read_text() == "t.py::test_x XFAIL (flaky)\n"
    result = cli("waive", "t.py::test_y", "--bug", "r", "--marker", "BOGUS", "-f", str(path))
    assert result.exit_code == 2 and "'--marker'" in result.output  # a choice of --marker: a usage error
    result = cli("waive", "t.py::test_z", "--gpu", "H100")  # --bug is required
    assert result.exit_code == 2 and "--bug" in result.output


def test_cli_missing_file_is_a_user_error(cli, tmp_path):
    for argv in (("unwaive", "t"), ("waives",)):
        result = cli(*argv, "-f", str(tmp_path / "missing.txt"))
        assert isinstance(result.exception, UserError) and "not found" in str(result.exception)


def test_cli_check_lists_entries_and_problems(cli, tmp_path):
    path = tmp_path / "waives.txt"
    path.write_text(FIXTURE)
    result = cli("waives", "-f", str(path))
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()
    assert rows[0].split() == ["LINE", "GPU", "MARKER", "TEST", "REASON"] and len(rows) == 1 + 18
    assert any(row.split()[:4] == ["11", "RTXPro6000D", "SKIP", EAGLE] for row in rows)
    report = json.loads(cli("waives", "-f", str(path), "--json").stdout)
    assert report["problems"] == [] and report["entries"][4]["gpu"] == "sm100"
    path.write_text(FIXTURE + "\nbroken line\n")
    result = cli("waives", "-f", str(path), "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["problems"][0].startswith("line 21: no marker")
    result = cli("waives", "-f", str(path))
    assert result.exit_code == 1 and "line 21" in result.stderr
