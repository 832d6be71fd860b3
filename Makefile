# One entry point for the README and CI. Every target installs what it needs first, and no more:
# the demo needs the package alone; the tests, lint and types add the dev extra; docs the docs
# extra. All go into the one virtualenv, each step marked by a stamp newer than pyproject.toml.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check
BASE := $(VENV)/.stamp-base
DEV := $(VENV)/.stamp-dev
DOCS := $(VENV)/.stamp-docs

.PHONY: demo test lint typecheck check docs bench flake-hunt clean

$(BASE): pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) -e .
	touch $@

$(DEV): $(BASE)
	$(PIP) -e '.[dev]'
	touch $@

$(DOCS): $(BASE)
	$(PIP) -e '.[docs]'
	touch $@

demo: $(BASE)
	$(VENV)/bin/tether demo

test: $(DEV)
	$(PY) -m pytest -q

lint: $(DEV)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples

typecheck: $(DEV)
	$(VENV)/bin/mypy

check: lint typecheck test

# The documentation site, into site/; --strict (in mkdocs.yml too) fails on any warning.
docs: $(DOCS)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(DEV)
	for f in bench/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

# Flaky tests: chosen tests many times alone, then the whole suite several times, with a tally
# (.ci/flake-hunt; FLAKE_TESTS, FLAKE_RUNS, FLAKE_BATCH, FLAKE_SUITES choose what and how often).
flake-hunt: $(DEV)
	VENV=$(VENV) bash .ci/flake-hunt

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache tether.db*
