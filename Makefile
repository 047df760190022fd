# Fresh machine:  make run   (set up, then generate with the embedded default model)
#                 make test  (set up, lint, then the whole test suite; what CI runs)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test test-fast lint format bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

run: setup
	$(BIN)/specdec-eval generate examples/prompts.jsonl --model smollm2 --max-new-tokens 48

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

bench: setup
	$(BIN)/specdec-eval bench --model smollm2 --num-prompts 32 --max-new-tokens 64

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
