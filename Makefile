# Two commands matter (see README.md):
#   make demo   - install, migrate, enqueue the demo jobs and show them
#   make test   - install and run the whole test suite
# Both use $DATABASE_URL, or start an embedded PostgreSQL (pgserver) when unset.
# make lint (ruff check + format check), make typecheck (mypy, configured in
# pyproject.toml), make docs (the Sphinx site in docs/, warnings are errors)
# and make package (build + twine check) need no database; .ci/run runs them
# all before the tests.
# CI picks the interpreter and Django line: make test PYTHON=python3.12 DJANGO='Django>=6.1,<6.2'

PYTHON ?= python3
DJANGO ?= Django>=5.2,<5.3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell echo '$(DJANGO)' | md5sum | cut -c1-8)

.PHONY: demo test lint typecheck docs package soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' '$(DJANGO)'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(PY) scripts/with_database.py sh -c '$(PY) testproject/manage.py migrate --verbosity 0 && $(PY) testproject/manage.py demo'

# The suite runs in four processes (pytest-xdist, a test database each;
# tests sharing a cluster or timing-sensitive share an xdist_group), even on
# two cores: its tests mostly wait on worker subprocesses and the database
# (two processes kept the CPUs ~40% busy), and four took the whole suite
# from ~410 s to ~290 s on the 2-core box.  XDIST= runs it in one process;
# AWA_HEAVY_TESTS=0 make test is the quick suite (no chaos, soak or
# million-job tests; smaller property tests).
XDIST ?= -n 4 --dist loadgroup
test: $(STAMP)
	$(PY) scripts/with_database.py $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The chaos scenarios (tests/reliability/test_chaos.py) round after round for
# DURATION seconds, with longer faults (FAULT_SECONDS); the report goes to
# bench/results/soak-<timestamp>.md and .json.  `make test` runs the bounded
# version.  They run on throwaway clusters: no DATABASE_URL needed.
DURATION ?= 1800
FAULT_SECONDS ?= 30
soak: $(STAMP)
	$(PY) -m tests.reliability.soak --duration $(DURATION) --fault-seconds $(FAULT_SECONDS)

# Runs ruff (lint and format) and the import-linter layer contracts in
# pyproject.toml; fails if any does.
lint: $(STAMP)
	$(VENV)/bin/ruff check .; status=$$?; $(VENV)/bin/ruff format --check . || status=1; \
	$(VENV)/bin/lint-imports --no-cache || status=1; exit $$status

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Every warning (an unresolved reference, a broken include) fails the build.
docs: $(STAMP)
	rm -rf docs/_build
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

# Builds the sdist and the wheel into a scratch folder and checks their
# metadata (README rendering, classifiers, URLs) the way PyPI would.
package: $(STAMP)
	rm -rf build/package && mkdir -p build/package/dist
	$(PY) -m build --outdir build/package/dist . >build/package/build.log 2>&1 || { tail -30 build/package/build.log; exit 1; }
	$(VENV)/bin/twine check --strict build/package/dist/*

clean:
	rm -rf build .venv .venv-* .pgdata .pytest_cache .hypothesis .mypy_cache docs/_build
