"""What a run stores: nothing gives GPQA text back, and a corrupt line in partial/ is detected and recomputed, never
trusted. The GPQA test uses the shared fake engine, whose outputs echo their prompts, so they quote every question:
if any stored field gave text back, the scan below would find it (the scan is checked to find it in memory)."""

from __future__ import annotations

import base64
import csv
import io
import json
import zipfile
import zlib
from pathlib import Path

import pytest
from specdec_eval.evals.pipeline.one_run import run_evaluation
from specdec_eval.evals.pipeline.resume import GenerationCache
from specdec_eval.evals.run_types import EvalOptions, RunPlan
from specdec_eval.evals.tasks.registry import parse_tasks
from specdec_eval.results.seal import seal, unseal
from specdec_eval.workers.config import SamplingParams
from specdec_eval.workers.interface import GenerationOutput

from ...engine_helpers import FakeEngine

ZIP = Path(__file__).resolve().parents[4] / "shared" / "data" / "gpqa" / "dataset.zip"
needs_gpqa = pytest.mark.skipif(not ZIP.is_file(), reason="no shared GPQA data")


def _question_snippets() -> set[str]:
    z = zipfile.ZipFile(ZIP)
    raw = z.read("dataset/gpqa_diamond.csv", pwd=b"deserted-untie-orchid").decode("utf-8", "replace")
    return {" ".join(row["Question"].split())[:40] for row in csv.DictReader(io.StringIO(raw)) if row["Question"]}


def _decodings(value, tokenizer) -> list[str]:
    """Every reading of a stored value someone could try: as is, base64/zlib, token ids through the tokenizer."""
    out = []
    if isinstance(value, str):
        out.append(value)
        try:
            out.append(zlib.decompress(base64.b64decode(value, validate=True)).decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001  not base64/zlib: fine
            pass
        try:
            out += _decodings(json.loads(value), tokenizer)
        except (ValueError, TypeError):
            pass
    elif isinstance(value, list) and value and all(isinstance(t, int) and 0 <= t < 400 for t in value):
        out.append(tokenizer.decode(value))
    elif isinstance(value, list):
        for v in value:
            out += _decodings(v, tokenizer)
    elif isinstance(value, dict):
        for v in value.values():
            out += _decodings(v, tokenizer)
    return out


def _stored_values(run_dir: Path) -> list:
    import pyarrow.parquet as pq

    values = []
    for path in run_dir.rglob("*"):
        if path.suffix == ".parquet":
            values += [v for row in pq.read_table(path).to_pylist() for v in row.values()]
        elif path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            values.append(text)
            for line in text.splitlines():
                try:
                    values.append(json.loads(line))
                except ValueError:
                    pass
    return values


def _leaks(values, tokenizer, snippets) -> int:
    flat = [" ".join(d.split()) for v in values for d in _decodings(v, tokenizer)]
    return sum(any(s in text for s in snippets) for text in flat)


@needs_gpqa
def test_no_stored_field_of_a_gpqa_run_gives_question_text_back(tiny, tmp_path):
    _, tokenizer = tiny
    engine = FakeEngine(tokenizer)  # its every output is its own prompt: it quotes the GPQA question in full
    plan = RunPlan(
        EvalOptions(parse_tasks("gpqa_diamond"), data_dir=str(ZIP.parents[1]), limit=3, no_reference=True),
        str(tmp_path / "runs"),
    )
    summary = run_evaluation(engine, plan)
    snippets = _question_snippets()
    run_dir = Path(summary.run_dir)
    # Power: the outputs really quote questions (in memory), and the scan finds quoted text when it is there.
    samples = __import__("specdec_eval.results.store", fromlist=["Run"]).Run(run_dir).samples()
    assert _leaks([s.output_token_ids for s in samples], tokenizer, snippets) == 3
    assert _leaks(_stored_values(run_dir), tokenizer, snippets) == 0


def test_sealed_values_round_trip_and_refuse_corruption():
    value = {"text": "a question?", "token_ids": [1, 2, 3]}
    sealed = seal(value)
    assert unseal(sealed) == value and "question" not in sealed and seal(value) == sealed
    with pytest.raises(ValueError, match="corrupt"):
        unseal(sealed[:-6] + "AAAAAA")


@pytest.mark.parametrize(
    "damage",
    [
        b"\xff\xfe not utf-8\n",
        b'{"key": "k", "index": "x"}\n',
        b'{"key": "k", "text_z": "***", "token_ids": []}\n',
        b'{"key": "k", "output": "sealed:v1:AAAA"}\n',
        b"[1, 2]\n",
    ],
    ids=["utf8", "shape", "base64", "seal", "not-object"],
)
def test_a_corrupt_partial_line_is_skipped_with_a_warning_and_recomputed(tmp_path, capsys, damage):
    params = SamplingParams(max_new_tokens=4)
    good = GenerationOutput(0, [1], [5, 6], "ok", "length")
    GenerationCache(tmp_path).put("a", params, good)
    path = next(tmp_path.glob("generations.*.jsonl"))
    path.write_bytes(path.read_bytes() + damage)
    cache = GenerationCache(tmp_path)
    assert cache.get("a", params).token_ids == [5, 6] and len(cache.entries) == 1
    assert len(cache.corrupt) == 1 and f"{path}:2" in cache.corrupt[0]
    err = capsys.readouterr().err
    assert "unreadable line" in err and "recomputed" in err and "--fresh" in err


def test_a_torn_last_line_does_not_swallow_the_next_record(tmp_path):
    params = SamplingParams(max_new_tokens=4)
    GenerationCache(tmp_path).put("a", params, GenerationOutput(0, [1], [5], "x", "length"))
    path = next(tmp_path.glob("generations.*.jsonl"))
    path.write_bytes(path.read_bytes() + b'{"key": "torn", "ind')  # the writer was killed mid-line
    cache = GenerationCache(tmp_path)
    cache.put("b", params, GenerationOutput(1, [1], [7], "y", "length"))
    again = GenerationCache(tmp_path)
    assert again.get("a", params).token_ids == [5] and again.get("b", params).token_ids == [7]
    assert len(again.corrupt) == 1  # only the torn half-line
