# cdcnorm developer entry points. `make up` runs the pipeline on an embedded default,
# `make test` runs the whole test suite; both create .venv on first use and install
# requirements/dev.txt (the lock of every extra), then the project itself with --no-deps, its
# compiled modules (mypyc, transforms.compiled) built in place where a C compiler is found.
# Both install the Debian packages they need when missing (as root: scripts/ensure-debian-packages):
# `up` needs redis-server and a JDK; `test` also PostgreSQL 15 (the Debezium ground truth) and
# Maven, which fetches the pinned Apache Kafka and Iceberg REST catalog jars once
# (scripts/ensure-kafka, scripts/ensure-rest-catalog; service/maven/).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILT := $(VENV)/.built
LOCK := requirements/dev.txt
# what the compiled modules are built from (setup.py, transforms.compiled): any source of transforms/
COMPILED_FROM := setup.py $(shell find transforms -name '*.py' -not -path '*/__pycache__/*')

.PHONY: up test test-fast lint check-deploy lock lock-check clean

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)
	touch $(STAMP)

# The project, editable, and its compiled modules built in place with the lock's mypyc and
# setuptools (--no-build-isolation); again whenever a source of transforms/ changes, so that no
# stale extension module runs (transforms.compiled also refuses one at import). CDCNORM_COMPILE=1
# fails where they cannot be built (CI sets it), =0 skips them; unset, they are built where a C
# compiler is found.
$(BUILT): $(STAMP) $(COMPILED_FROM)
	if [ "$${CDCNORM_COMPILE:-}" = 1 ]; then PYTHON=$(BIN)/python scripts/ensure-debian-packages cc; fi
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -c "import transforms; print('cdcnorm: transforms', transforms.compiled_status())"
	touch $(BUILT)

up: $(BUILT)
	scripts/ensure-debian-packages redis java
	$(BIN)/cdcnorm up --keep

test: $(BUILT)
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

test-fast: $(BUILT)
	scripts/check-deploy-tools
	$(BIN)/pytest -q -m "not integration"

lint: $(BUILT)
	$(BIN)/ruff check .
	$(BIN)/mypy

check-deploy: $(BUILT)
	scripts/check-deploy

# after a change to pyproject.toml's dependencies: rewrite requirements/*.txt (needs the index)
lock: $(STAMP)
	scripts/lock

# requirements/*.txt recompiled from pyproject.toml must equal the committed ones
lock-check: $(STAMP)
	scripts/lock --check

clean:
	rm -rf $(VENV) .venv-flink .venv-checkov .pytest_cache .mypy_cache build *.egg-info transforms/compiled.json
	find . -name '*.so' -not -path './.venv*' -delete
