# countersign — `make run` runs the local stack, `make test` runs the tests. Both install what they need.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test lint format clean

$(STAMP): pyproject.toml
	command -v redis-server >/dev/null || { apt-get update -q && apt-get install -y -q redis-server; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/countersign run

test: install
	$(BIN)/ruff check countersign tests examples bench
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check countersign tests examples bench
	$(BIN)/ruff format --check countersign tests examples bench

format: install
	$(BIN)/ruff format countersign tests examples bench
	$(BIN)/ruff check --fix countersign tests examples bench

clean:
	rm -rf $(VENV) countersign.egg-info .pytest_cache .ruff_cache
