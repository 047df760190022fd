"""Finished generations of a run, kept as they complete, so an interrupted run resumes without recomputing them.

Each writer (the process, or each replica leader of a torchrun job) appends JSON lines to its own file in the
run's partial/ folder; a torn last line from a killed process is skipped. The key is a hash of the prompt and the
sampling parameters, so a cached output is only reused for exactly the same request. Output text is stored
zlib-compressed and base64-encoded, never in plain text: a model's answer can quote its GPQA question, and GPQA
text must not sit in readable files (the run folder lives inside the checkout)."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..workers.config import SamplingParams
from ..workers.interface import GenerationOutput


def request_key(prompt: Any, sampling: SamplingParams) -> str:
    text = json.dumps([prompt, asdict(sampling)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class GenerationCache:
    def __init__(self, folder: str | Path | None, writer: str = "rank0", load: bool = True) -> None:
        self.folder = Path(folder) if folder else None
        self.writer = writer
        self.entries: dict[str, GenerationOutput] = {}
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            if load:
                self._load()

    def _load(self) -> None:
        for path in sorted(self.folder.glob("generations.*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line of a killed writer
                key = rec.pop("key")
                if "text_z" in rec:  # older files kept "text" in plain; both load
                    rec["text"] = _unpack(rec.pop("text_z"))
                self.entries[key] = GenerationOutput(**rec)

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
        record = asdict(output)
        record["text_z"] = _pack(record.pop("text"))
        with (self.folder / f"generations.{self.writer}.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, **record}) + "\n")


def _pack(text: str) -> str:
    return base64.b64encode(zlib.compress(text.encode("utf-8"))).decode("ascii")


def _unpack(packed: str) -> str:
    return zlib.decompress(base64.b64decode(packed)).decode("utf-8")
