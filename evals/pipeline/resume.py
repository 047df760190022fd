"""Finished generations of a run, kept as they complete, so an interrupted run resumes without recomputing them.

Each writer (the process, or each replica leader of a torchrun job) appends JSON lines to its own file in the run's
partial/ folder. The key is a hash of the prompt and the sampling parameters, so a cached output is only reused for
exactly the same request. Outputs (text and token ids) are stored sealed, and prompts only as a
hash: a model's answer can quote its GPQA question, and GPQA text must not sit in readable files.

A line that cannot be read (a torn last line of a killed writer, bad UTF-8, a wrong shape, a corrupt seal) is never
trusted: it is skipped with a warning naming the file and line, and its generation is simply recomputed. Appending
after a torn line starts a new line first, so the next record is not lost with it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import sys
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ...results.seal import seal, unseal
from ...workers.config import SamplingParams
from ...workers.interface import GenerationOutput


def request_key(prompt: Any, sampling: SamplingParams) -> str:
    params = asdict(sampling)
    if params.get("logprobs") is None:  # keys of runs recorded before logprobs existed stay the same
        params.pop("logprobs", None)
    text = json.dumps([prompt, params], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class GenerationCache:
    def __init__(self, folder: str | Path | None, writer: str = "rank0", load: bool = True) -> None:
        self.folder = Path(folder) if folder else None
        self.writer = writer
        self.entries: dict[str, GenerationOutput] = {}
        self.corrupt: list[str] = []  # "file:line: why" of every line that was skipped
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            if load:
                self._load()

    def _load(self) -> None:
        for path in sorted(self.folder.glob("generations.*.jsonl")):
            for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
                if not raw.strip():
                    continue
                try:
                    key, output = _parse(raw)
                except (ValueError, TypeError, KeyError) as e:
                    self.corrupt.append(f"{path}:{number}: {e}")
                    continue
                self.entries[key] = output
        if self.corrupt:
            print(
                f"warning: {len(self.corrupt)} unreadable line(s) in {self.folder} (first: {self.corrupt[0]}); "
                "their generations will be recomputed (--fresh starts the run over)",
                file=sys.stderr,
            )

    def get(self, prompt: Any, sampling: SamplingParams) -> GenerationOutput | None:
        return self.entries.get(request_key(prompt, sampling))

    def for_replica(self, rank: int) -> GenerationCache:
        """The writer a replica leader of a torchrun job uses: the same folder, its own file (no entries loaded)."""
        return GenerationCache(self.folder, f"rank{rank}", load=False)

    def put(self, prompt: Any, sampling: SamplingParams, output: GenerationOutput) -> None:
        key = request_key(prompt, sampling)
        self.entries[key] = output
        if self.folder is None:
            return
        record = {
            "key": key,
            "index": output.index,
            "finish_reason": output.finish_reason,
            "error": output.error,
            "stats": output.stats,
            "num_prompt_tokens": len(output.prompt_token_ids),
            "prompt_sha256": hashlib.sha256(json.dumps(output.prompt_token_ids).encode()).hexdigest()[:16],
            "output": seal(
                {
                    "text": output.text,
                    "token_ids": output.token_ids,
                    **({"logprobs": output.logprobs} if output.logprobs is not None else {}),
                }
            ),
        }
        path = self.folder / f"generations.{self.writer}.jsonl"
        with path.open("a+b") as f:
            if f.tell() and _ends_torn(f):  # a killed writer left half a line: start a new one
                f.write(b"\n")
            f.write(json.dumps(record).encode("utf-8") + b"\n")


def _ends_torn(f) -> bool:
    f.seek(-1, 2)
    torn = f.read(1) != b"\n"
    f.seek(0, 2)
    return torn


def _parse(raw: bytes) -> tuple[str, GenerationOutput]:
    """One stored line as (key, output); ValueError / TypeError / KeyError for anything malformed."""
    rec = json.loads(raw.decode("utf-8"))
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
        raise ValueError("not a generation record")
    if "output" in rec:
        sealed = unseal(rec["output"])
        text, token_ids = sealed["text"], sealed["token_ids"]
        logprobs = sealed.get("logprobs")
    else:  # older files: text in plain or zlib+base64, token ids in plain
        text = _unpack(rec["text_z"]) if "text_z" in rec else rec["text"]
        token_ids = rec["token_ids"]
        logprobs = None
    if not isinstance(text, str) or not isinstance(token_ids, list) or not all(isinstance(t, int) for t in token_ids):
        raise ValueError("wrong shape")
    output = GenerationOutput(
        index=int(rec["index"]),
        prompt_token_ids=[],
        token_ids=token_ids,
        text=text,
        finish_reason=str(rec["finish_reason"]),
        stats=dict(rec.get("stats") or {}),
        error=rec.get("error"),
        logprobs=logprobs,
    )
    return rec["key"], output


def _unpack(packed: str) -> str:
    try:
        return zlib.decompress(base64.b64decode(packed, validate=True)).decode("utf-8")
    except (binascii.Error, zlib.error) as e:
        raise ValueError(f"corrupt text ({type(e).__name__})") from None
