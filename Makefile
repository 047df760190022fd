# Fresh machine:  make run   (set up for the main job, then the main job: a GSM8K accuracy + lossless run of the
#                             embedded default model with one-model Eagle3, against its reference and its
#                             non-speculative baseline)
#                 make test  (set up for the main job and for the tests, lint, then the whole test suite; what CI runs)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-tests

.PHONY: setup setup-tests setup-vllm setup-vllm-install run test test-fast lint format bench clean

# What the main job needs: torch, the project, the embedded model.
setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

# What only the tests need on top: pytest and ruff, llama.cpp's server (compiled) and Chromium.
setup-tests: $(TEST_STAMP) setup-vllm

$(TEST_STAMP): $(STAMP) scripts/llama-cpp-lean.cmake scripts/check_llama_peer.py
	bash scripts/setup.sh --for-tests
	touch $(TEST_STAMP)

# vLLM's CPU build in a venv of its own (VLLM_VENV, default .venv-vllm), the exported SmolLM2 and one completion
# checked: the peer of the vLLM tests and of "Judging vLLM" in the README. Minutes the first time; seconds once its
# stamps say the venv imports vllm and has answered. Its install needs nothing of the project's venv, so with -j2 it
# runs beside the project's setup; the export and the check need both.
setup-vllm: setup-vllm-install $(STAMP)
	bash scripts/setup_vllm.sh

setup-vllm-install:
	bash scripts/setup_vllm.sh --install-only

DATA ?= ../shared/data
# Real GSM8K when the data folder is there; otherwise the shipped smoke problems (never scored against references).
RUN_TASKS := $(if $(wildcard $(DATA)/gsm8k),--tasks gsm8k --data-dir $(DATA),--tasks gsm8k_smoke)

run: setup
	$(BIN)/specdec-eval run $(RUN_TASKS) --limit 10 --spec eagle3 --model smollm2

lint: setup-tests
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup-tests
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# --durations=25: the slowest tests close every run, so the CI budget (40 min from a fresh clone) stays visible.
# TEST_WORKERS pytest-xdist workers (one torch thread each; a test file, or the files sharing a session's servers, on
# one worker; the slow ones first: tests/parallel.py). `make test TEST_WORKERS=0` runs the suite serially, in one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test: lint docs
	$(PYTEST) -q --durations=25

test-fast: setup-tests
	$(PYTEST) -q -m "not slow"

# Speed (ours vs HF vs spec-dec, batch 1 and 16, 2 interleaved rounds; it prints its expected duration first: ~10 min
# here), then time to verdict on 8 GSM8K documents (a few minutes). Each engine's memory is sized from the plan.
bench: setup
	$(BIN)/specdec-eval bench --model smollm2 --spec eagle3 --prompts gsm8k --data-dir ../shared/data
	$(BIN)/specdec-eval bench --verdict --model smollm2 --spec eagle3 --data-dir ../shared/data --docs 8

# The manual (docs/, mkdocs.yml): MkDocs + Material from the `docs` extra. `make docs` builds it strictly into site/
# (part of `make test`): a broken link, a page outside the nav, a flag the CLI lacks, a stale command reference, a
# path that moved, each fails it (scripts/docs/hooks.py). `make docs-serve` serves it on 127.0.0.1:8000.
.PHONY: setup-docs docs docs-serve
DOCS_STAMP := $(VENV)/.installed-docs

setup-docs: $(DOCS_STAMP)

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: setup-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: setup-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
