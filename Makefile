# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs what it needs (Debian's graphviz included).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint diagrams docs docs-build screenshot bench guard mutation setup clean

demo: $(STAMP)
	$(PY) -m innerloop demo

test: $(STAMP)
	$(PY) -m pytest --innerloop-coverage-strict

lint: $(STAMP)
	$(PY) -m ruff check innerloop tests bench examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

diagrams: $(STAMP)
	$(PY) -m innerloop diagram --write-all diagrams

# The manual (mkdocs.yml, docs/): served with live reload, or built strictly into site/.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
docs: $(STAMP)
	$(MKDOCS) serve

docs-build: $(STAMP)
	$(MKDOCS) build --strict

screenshot: $(STAMP)
	INNERLOOP_SCREENSHOT=1 $(PY) -m pytest -q tests/ui/test_browser.py -k demo_run

bench: $(STAMP)
	$(PY) bench/overhead.py

# Instructions per iteration (valgrind) of the main contenders against bench/baseline.json:
# fails when one rose more than 5%. A meant change: bench/overhead.py --guard --write-baseline.
guard: $(STAMP)
	$(PY) bench/overhead.py --guard

# Mutation testing of the modules that decide a run's route (not in CI: minutes, not
# seconds). MUTATION_ARGS="--sample 0" runs every mutant; see bench/mutation.py.
MUTATION_ARGS ?= --sample 30 --seed 22
mutation: $(STAMP)
	$(PY) bench/mutation.py $(MUTATION_ARGS)

setup: $(STAMP)

# The install is editable; pyproject's package-dir makes it a plain path entry (a .pth
# line), which type checkers follow too: mypy run outside the repo finds innerloop.testing.
$(STAMP): pyproject.toml scripts/setup-system.sh
	sh scripts/setup-system.sh
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV)
