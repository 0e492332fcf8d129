# cdcnorm developer entry points. `make up` runs the pipeline on an embedded default,
# `make test` runs the whole test suite; both create .venv on first use and install
# requirements/dev.txt (the lock of every extra), then the project itself with --no-deps.
# Both install the Debian packages they need when missing (as root: scripts/ensure-debian-packages):
# `up` needs redis-server and a JDK; `test` also PostgreSQL 15 (the Debezium ground truth) and
# Maven, which fetches the pinned Apache Kafka and Iceberg REST catalog jars once
# (scripts/ensure-kafka, scripts/ensure-rest-catalog; service/maven/).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements/dev.txt

.PHONY: up test test-fast lint check-deploy lock lock-check clean

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

up: $(STAMP)
	scripts/ensure-debian-packages redis java
	$(BIN)/cdcnorm up --keep

test: $(STAMP)
	scripts/ensure-debian-packages redis postgres java maven
	scripts/ensure-redis
	scripts/ensure-kafka
	scripts/ensure-rest-catalog
	scripts/check-deploy-tools
	$(BIN)/ruff check .
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	scripts/audit
	scripts/run-tests

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not integration"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

check-deploy: $(STAMP)
	scripts/check-deploy

# after a change to pyproject.toml's dependencies: rewrite requirements/*.txt (needs the index)
lock: $(STAMP)
	scripts/lock

# requirements/*.txt recompiled from pyproject.toml must equal the committed ones
lock-check: $(STAMP)
	scripts/lock --check

clean:
	rm -rf $(VENV) .venv-flink .venv-checkov .pytest_cache .mypy_cache build *.egg-info
