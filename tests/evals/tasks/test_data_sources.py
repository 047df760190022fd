"""Where task data comes from: --data-dir, then $SPECDEC_EVAL_DATA, then the Hugging Face cache/hub, with one
clear error when none has it. All files here are written into tmp_path; the hub is never contacted."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pandas as pd
import pytest
from specdec_eval.evals.tasks.data import DATA_ENV
from specdec_eval.evals.tasks.gpqa import GPQA_ZIP_MEMBER, gpqa_source
from specdec_eval.evals.tasks.gsm8k import gsm8k_source

from specdec_eval.errors import UserError


@pytest.fixture(autouse=True)
def _collect_engines():
    """Overrides conftest's per-test gc.collect: no engines are built here."""
    yield


@pytest.fixture(autouse=True)
def _no_env_and_no_hub(monkeypatch):
    """No SPECDEC_EVAL_DATA from the caller's shell, and a hub that is never reached unless a test says so."""
    monkeypatch.delenv(DATA_ENV, raising=False)
    calls = []

    def offline(*args, **kwargs):
        calls.append(args)
        raise ConnectionError(f"Couldn't reach '{args[0]}' on the Hub (OfflineModeIsEnabled)\nsecond line of detail")

    monkeypatch.setattr(datasets, "load_dataset_builder", offline)
    return calls


ROWS = {
    "train": [{"question": "Tom has 2 pens and buys 3. How many?", "answer": "2+3=<<2+3=5>>5\n#### 5"}],
    "test": [
        {"question": "A box has 4 cups; 2 boxes?", "answer": "4*2=<<4*2=8>>8\n#### 8"},
        {"question": "Ann has 10 and gives 7. Left?", "answer": "10-7=<<10-7=3>>3\n#### 3"},
    ],
}


def write_gsm8k(folder: Path, fmt: str, name: str = "{split}") -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in ROWS.items():
        path = folder / (name.format(split=split) + "." + fmt)
        frame = pd.DataFrame(rows)
        if fmt == "jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        elif fmt == "json":
            frame.to_json(path, orient="records", lines=True)
        elif fmt == "parquet":
            frame.to_parquet(path, index=False)
        elif fmt == "csv":
            frame.to_csv(path, index=False)
        paths[split] = str(path.resolve())
    return paths


def _load(src) -> dict[str, list[dict]]:
    """What lm-eval will load from the source: datasets.load_dataset(builder, data_files=...)."""
    loaded = datasets.load_dataset(src.builder, data_files=src.files, keep_in_memory=True)
    return {split: [dict(r) for r in loaded[split]] for split in loaded}


@pytest.mark.parametrize("fmt, builder", [("jsonl", "json"), ("json", "json"), ("parquet", "parquet"), ("csv", "csv")])
def test_gsm8k_local_formats(tmp_path, fmt, builder):
    files = write_gsm8k(tmp_path / "gsm8k", fmt)
    src = gsm8k_source(str(tmp_path))
    assert src.builder == builder and src.files == files and src.hub is None
    assert src.origin == f"local:{(tmp_path / 'gsm8k').resolve()}"
    assert _load(src) == ROWS


def test_gsm8k_files_directly_in_the_data_dir(tmp_path):
    files = write_gsm8k(tmp_path, "jsonl")
    src = gsm8k_source(str(tmp_path))
    assert (src.builder, src.files) == ("json", files)


def test_gsm8k_hf_snapshot_layout(tmp_path):
    files = write_gsm8k(tmp_path / "gsm8k" / "main", "parquet", name="{split}-00000-of-00001")
    src = gsm8k_source(str(tmp_path))
    assert src.builder == "parquet" and src.files == files
    assert src.files["test"].endswith("gsm8k/main/test-00000-of-00001.parquet")
    assert _load(src) == ROWS


def test_gsm8k_prefers_jsonl_over_other_formats(tmp_path):
    files = write_gsm8k(tmp_path / "gsm8k", "jsonl")
    write_gsm8k(tmp_path / "gsm8k", "parquet")
    assert gsm8k_source(str(tmp_path)).files == files


def test_gsm8k_needs_both_splits(tmp_path, _no_env_and_no_hub):
    write_gsm8k(tmp_path / "gsm8k", "jsonl")
    (tmp_path / "gsm8k" / "train.jsonl").unlink()  # 5-shot GSM8K draws its shots from train
    with pytest.raises(UserError, match="gsm8k/train.jsonl and gsm8k/test.jsonl"):
        gsm8k_source(str(tmp_path))
    assert _no_env_and_no_hub == [("openai/gsm8k", "main")]  # it did fall back to the hub


def test_gsm8k_ambiguous_shards_are_not_picked(tmp_path):
    folder = tmp_path / "gsm8k" / "main"
    write_gsm8k(folder, "parquet", name="{split}-00000-of-00002")
    write_gsm8k(folder, "parquet", name="{split}-00001-of-00002")
    with pytest.raises(UserError):  # two shards per split: not one file each, so not taken silently
        gsm8k_source(str(tmp_path))


def test_env_var_used_without_data_dir(tmp_path, monkeypatch):
    files = write_gsm8k(tmp_path / "gsm8k", "jsonl")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert gsm8k_source(None).files == files


def test_data_dir_beats_env_var(tmp_path, monkeypatch):
    files = write_gsm8k(tmp_path / "a" / "gsm8k", "jsonl")
    write_gsm8k(tmp_path / "b" / "gsm8k", "jsonl")
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "b"))
    assert gsm8k_source(str(tmp_path / "a")).files == files


def test_data_dir_expands_user(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    files = write_gsm8k(tmp_path / "gsm8k", "jsonl")
    assert gsm8k_source("~").files == files


def test_data_dir_not_a_folder(tmp_path):
    for bad in (tmp_path / "missing", tmp_path / "file.txt"):
        if bad.name == "file.txt":
            bad.write_text("x", encoding="utf-8")
        with pytest.raises(UserError, match=f"--data-dir {bad} is not a folder"):
            gsm8k_source(str(bad))
        with pytest.raises(UserError, match="--data-dir"):
            gpqa_source(str(bad))


def test_env_var_not_a_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "missing"))
    with pytest.raises(UserError, match=f"{DATA_ENV} .* is not a folder"):
        gsm8k_source(None)


@pytest.mark.parametrize("given", ["none", "empty-dir"])
@pytest.mark.parametrize(
    "source, hub", [(gsm8k_source, "openai/gsm8k"), (gpqa_source, "Idavidrein/gpqa")], ids=["gsm8k", "gpqa"]
)
def test_nothing_local_and_hub_unreachable(tmp_path, given, source, hub):
    with pytest.raises(UserError) as e:
        source(None if given == "none" else str(tmp_path))
    message = str(e.value)
    assert "\n" not in message
    assert "--data-dir" in message and hub in message
    assert "OfflineModeIsEnabled" in message  # the first line of the hub's reason
    if given == "none":
        assert DATA_ENV in message
    else:
        assert str(tmp_path) in message


def test_hub_used_when_reachable(monkeypatch):
    seen = []
    monkeypatch.setattr(datasets, "load_dataset_builder", lambda *a, **k: seen.append(a))
    src = gsm8k_source(None)
    assert src.hub == ("openai/gsm8k", "main") and src.builder is None and src.files == {}
    assert src.origin == "hub:openai/gsm8k/main"
    assert gpqa_source(None).hub == ("Idavidrein/gpqa", "gpqa_diamond")
    assert seen == [("openai/gsm8k", "main"), ("Idavidrein/gpqa", "gpqa_diamond")]


def test_hub_error_without_message(monkeypatch):
    def fail(*a, **k):
        raise ConnectionError()

    monkeypatch.setattr(datasets, "load_dataset_builder", fail)
    with pytest.raises(UserError, match=r"\(ConnectionError\)"):
        gsm8k_source(None)


# --- GPQA -------------------------------------------------------------------------------------------------


SYNTHETIC_GPQA = "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\nq?,r,w1,w2,w3\n"


def _touch(path: Path) -> Path:
    """A synthetic GPQA file of the kind the name says: the source is schema-checked when it is resolved."""
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(GPQA_ZIP_MEMBER, SYNTHETIC_GPQA)
    else:
        path.write_text(SYNTHETIC_GPQA)
    return path


def test_gpqa_zip(tmp_path):
    zip_path = _touch(tmp_path / "gpqa" / "dataset.zip")
    src = gpqa_source(str(tmp_path))
    assert (src.builder, src.files) == ("gpqa-zip", {"train": str(zip_path.resolve())})
    assert src.origin == f"local:{zip_path.resolve()}"


@pytest.mark.parametrize("relative", ["gpqa/gpqa_diamond.csv", "gpqa/dataset/gpqa_diamond.csv"])
def test_gpqa_csv_layouts(tmp_path, relative):
    csv_path = _touch(tmp_path / relative)
    src = gpqa_source(str(tmp_path))
    assert (src.builder, src.files) == ("csv", {"train": str(csv_path.resolve())})


def test_gpqa_zip_preferred_over_csv(tmp_path):
    _touch(tmp_path / "gpqa" / "gpqa_diamond.csv")
    _touch(tmp_path / "gpqa" / "dataset" / "gpqa_diamond.csv")
    zip_path = _touch(tmp_path / "gpqa" / "dataset.zip")
    assert gpqa_source(str(tmp_path)).files == {"train": str(zip_path.resolve())}


def test_gpqa_files_directly_in_the_data_dir(tmp_path):
    zip_path = _touch(tmp_path / "dataset.zip")
    assert gpqa_source(str(tmp_path)).builder == "gpqa-zip"
    assert gpqa_source(str(tmp_path)).files["train"] == str(zip_path.resolve())


def test_gpqa_missing_names_the_layout(tmp_path):
    write_gsm8k(tmp_path / "gsm8k", "jsonl")  # GSM8K present, GPQA not
    with pytest.raises(UserError, match="gpqa/dataset.zip") as e:
        gpqa_source(str(tmp_path))
    assert "--data-dir" in str(e.value) and "Idavidrein/gpqa" in str(e.value)


def test_shared_data_folder_if_present():
    """The project's own data folder is recognised as-is (skipped where it does not exist)."""
    shared = Path(__file__).resolve().parents[4] / "shared" / "data"  # ../shared/data, as the Makefile
    if not (shared / "gsm8k" / "test.jsonl").is_file() or not (shared / "gpqa" / "dataset.zip").is_file():
        pytest.skip("no shared data folder")
    g = gsm8k_source(str(shared))
    assert g.builder == "json" and Path(g.files["test"]).name == "test.jsonl"
    assert gpqa_source(str(shared)).builder == "gpqa-zip"
    assert GPQA_ZIP_MEMBER == "dataset/gpqa_diamond.csv"
