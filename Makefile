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
# server, MariaDB or PgBouncer), without the end-to-end runs: the faults and
# torture, the browser, the fuzzing, the demo, the example project and
# Prometheus' scrape (real processes, Chromium and Prometheus). `make test`
# runs everything.
FAST_IGNORE := --ignore=tests/faults --ignore=tests/browser --ignore=tests/fuzz \
    --ignore=tests/test_demo.py --ignore=tests/test_example_project.py \
    --ignore=tests/http/test_prometheus.py
# pytest-xdist processes for the first stage. The machine has 2 cores, but
# most tests wait on the databases and on the worker processes they start, so
# two more processes keep both cores busy (CONTRIBUTING.md has the figures).
JOBS ?= 4
# The long tests come first (tests/conftest.py); xdist's scheduler would hand
# each process a long run of them at once, and one process would end up with
# most. One or two at a time, they spread.
XDIST = -n $(JOBS) --maxschedchunk 1
# pytest's exit status 5 is "no tests collected": a stage PYTEST_ARGS picked
# nothing of, which is no failure.
NONE_COLLECTED := [ $$? -eq 5 ]

.PHONY: venv demo serve test test-fast torture lint typecheck clean bench-env

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# mysqlclient compiles against libmariadb-dev, which a fresh machine lacks:
# without it MariaDB's cases skip, saying so (under CI they fail instead, and
# .ci/run installs the headers first).
$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@$(BIN)/python -m pip install --quiet -e ".[mysql]" >$(VENV)/mysqlclient.log 2>&1 \
	    || echo "mysqlclient could not be built (apt-get install libmariadb-dev pkg-config," \
	        "then rm $@ and make again): MariaDB's cases will skip; see $(VENV)/mysqlclient.log"
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

# Two stages: every test that can share the machine, on $(JOBS) processes, a
# test database each; then the `serial` ones alone (they stop the machine's
# MariaDB, or time things that need both cores). All but the torture profile,
# which `make torture` runs (and CI, after this).
test: $(DEV_STAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not serial" $(PYTEST_ARGS) || $(NONE_COLLECTED)
	$(BIN)/python -m pytest -m "serial and not torture" $(PYTEST_ARGS) || $(NONE_COLLECTED)

# The torture profile: minutes of chaos on eight workers, on PostgreSQL and on
# the machine's MariaDB (docs/reliability.md).
torture: $(DEV_STAMP)
	$(BIN)/python -m pytest -m torture $(PYTEST_ARGS)

test-fast: $(DEV_STAMP)
	DATABASE_URL= BGTASKS_MYSQL_URL= BGTASKS_PGBOUNCER=0 $(BIN)/python -m pytest $(XDIST) \
	    $(FAST_IGNORE) $(PYTEST_ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

# benchmarks/tasks_throughput.py's environment: the other Django Tasks
# backends need Python 3.12+ (and dj-queue Django 6), so they get a venv of
# their own, .venv-bench, on pyenv's 3.13 (BENCH_PYTHON to use another),
# with this package and the peers pinned in benchmarks/requirements-peers.txt.
BENCH_PYTHON ?= $(shell pyenv root 2>/dev/null || echo ~/.pyenv)/versions/3.13.0/bin/python
bench-env: .venv-bench/.installed
.venv-bench/.installed: pyproject.toml benchmarks/requirements-peers.txt
	$(BENCH_PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip install --quiet -e ".[mysql,postgres,embedded]" \
	    -r benchmarks/requirements-peers.txt
	touch $@

clean:
	rm -rf $(VENV) .venv-bench .tmp .nox build dist
