"""The docs checks on small planted texts: each finds what it exists for, and nothing in a clean text."""

from __future__ import annotations

from .helpers import REPO, module

checks = module("checks")


def test_options_are_checked_against_the_real_command():
    ok = "<!-- example: ci -->\n```bash\nspecdec-eval run --tasks gsm8k_smoke --model tiny --limit=2\n```\n"
    assert checks.command_problems(ok) == []
    stale = ok.replace("--limit=2", "--limits 2")
    assert checks.command_problems(stale) == ["line 2: 'specdec-eval run' has no option --limits"]


def test_flags_after_a_lone_dash_dash_are_runs_for_ab_and_sweep():
    text = "```bash\nspecdec-eval sweep --dir d --axis batch=1,2 -- --model tiny --kv-cache v2 \\\n  --nope\n```\n"
    assert checks.command_problems(text) == ["line 1: 'specdec-eval run' has no option --nope"]


def test_sub_commands_and_unknown_commands():
    assert checks.command_problems("```bash\nspecdec-eval engine info --model tiny\n```\n") == []
    assert checks.command_problems("```bash\nspecdec-eval engine infos\n```\n") == [
        "line 1: 'specdec-eval engine infos': no such command"
    ]


def test_an_example_must_say_where_it_runs():
    block = "```bash\n.venv/bin/specdec-eval runs\n```\n"
    assert len(checks.example_marker_problems(block)) == 1
    assert checks.example_marker_problems("<!-- example: ci -->\n" + block) == []
    assert checks.example_marker_problems("<!-- example: needs a GPU -->\n" + block) == []
    assert checks.example_marker_problems("```bash\nmake docs\n```\n") == []  # no specdec-eval: no marker needed


def test_paths_and_modules_must_exist():
    assert checks.path_problems("`evals/gates/verdict.py` and `workers/spec/`") == []
    assert checks.path_problems("`evals/gates/gone.py`") == ["line 1: `evals/gates/gone.py` is not in the repository"]
    assert checks.module_problems("`twin_audit.py`") == []
    assert checks.module_problems("`no_such_module.py`") == ["line 1: `no_such_module.py` is no file in the repository"]


def test_imports_must_resolve():
    assert checks.import_problems("from specdec_eval.workers.config import EngineConfig") == []
    assert checks.import_problems("```python\nfrom specdec_eval.workers.gone import X\n```") == [
        "line 2: imports specdec_eval.workers.gone, which the package does not have"
    ]


def test_citations_of_files_outside_the_repository(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text(
        '"""The run store (DESIGN.md, "Seams"); see shared/reference/eagle3.md and ../shared/ENVIRONMENT.md.\n'
        'Inside it: docs/architecture.md and README.md."""\n'
    )
    problems = checks.citation_problems(REPO, [src])
    cited = sorted(p.split(" cites ")[1].split(",")[0] for p in problems)
    assert cited == ["../shared/ENVIRONMENT.md", "DESIGN.md", "shared/reference/eagle3.md"], problems


def test_the_product_cites_no_file_outside_the_repository():
    assert checks.citation_problems() == []


def test_the_readme_links_and_commands_hold():
    assert checks.readme_problems() == []
