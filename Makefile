# cdcnorm developer entry points. `make up` runs the pipeline on an embedded default,
# `make test` runs the whole test suite; both create .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test test-fast lint check-deploy clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

up: $(STAMP)
	$(BIN)/cdcnorm up

test: $(STAMP)
	scripts/ensure-redis
	scripts/check-deploy-tools
	$(BIN)/ruff check .
	$(BIN)/mypy
	scripts/audit
	$(BIN)/pytest -q

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not integration"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

check-deploy: $(STAMP)
	scripts/check-deploy

clean:
	rm -rf $(VENV) .venv-flink .pytest_cache .mypy_cache build *.egg-info
