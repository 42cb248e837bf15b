# Two commands do all the set-up on a fresh machine (see README):
#   make run    install into .venv and show this machine's GPUs (`vram status`)
#   make test   install into .venv with the test tools and run the whole test suite
# While working: `make test-fast` runs everything but the tests marked slow (under a minute).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	$(BIN)/vram status $(ARGS)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks scripts

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_snapshot.py
	$(BIN)/python benchmarks/bench_status.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
