# The README's commands. Each sets up .venv on first use (python3 -m venv), so
# nothing needs installing by hand, and installs only what it needs:
# `make demo` and `make serve` the "demo" extra, `make test` and the other
# developer targets the "dev" extra (which holds the demo's too). Each extra
# has its own stamp file, so each is installed once, whichever target comes
# first, and again only when pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEV_STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-demo
# The development loop: SQLite and the embedded PostgreSQL (not DATABASE_URL's
# server), without the fault-injection and torture runs, the browser test and
# the fuzzing. `make test` runs everything.
FAST_IGNORE := --ignore=tests/faults --ignore=tests/browser --ignore=tests/fuzz

.PHONY: venv demo serve test test-fast lint typecheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

# The dev extra holds everything the demo needs: after `make test`, `make
# demo` installs nothing more.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@if [ $(DEV_STAMP) -nt pyproject.toml ]; then \
	    echo "the demo's packages came with the dev install"; \
	else \
	    echo '$(BIN)/python -m pip install --quiet -e ".[demo]"'; \
	    $(BIN)/python -m pip install --quiet -e ".[demo]"; \
	fi
	touch $@

venv: $(DEV_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python example_project/demo.py

serve: $(DEMO_STAMP)
	$(BIN)/python example_project/serve.py

test: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(DEV_STAMP)
	DATABASE_URL= BGTASKS_MYSQL_URL= $(BIN)/python -m pytest $(FAST_IGNORE) $(PYTEST_ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .tmp .nox build dist
