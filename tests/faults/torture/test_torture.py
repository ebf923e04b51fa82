"""The torture run: eight workers on one short lease, and a chaos process
that pauses, kills and restarts them, crashes PostgreSQL once, and cancels
and force-releases from the command line (``manage.py bgtasks``). Then every invariant is checked
from the database, and the results table is printed.

    .venv/bin/python -m pytest tests/faults/torture -s                  # CI profile, ~2.5 min
    BGTASKS_SOAK=1 .venv/bin/python -m pytest tests/faults/torture -s   # soak, 15 min of chaos

``BGTASKS_SOAK_SECONDS`` sets the soak's length and ``BGTASKS_TORTURE_SEED``
replays a run's order of faults (the seed is printed with the table).

It runs on the embedded PostgreSQL that the suite starts and owns, because
the chaos process crashes and restarts the server: the machine's own server
(``DATABASE_URL``) is shared with everything else on the machine, and SQLite
has no server to crash.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from django_bgtasks.models import BackgroundTask, TaskRun
from tests.faults.torture.invariants import Evidence, check
from tests.procs import ROOT, worker_env
from tests.testapp.models import Counter, LedgerEntry

ALIAS = "postgres"
NAME = "job"
TTL = 1.0
WORKERS = 8
SOAK = bool(os.environ.get("BGTASKS_SOAK"))
SECONDS = float(os.environ.get("BGTASKS_SOAK_SECONDS", 900)) if SOAK else 120.0
RESULTS = Path(ROOT) / ".tmp" / "torture-results.md"


@pytest.mark.django_db(transaction=True, databases=[ALIAS])
def test_torture(
    embedded_postgres: Any, settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    settings.BGTASKS_DATABASE = ALIAS
    Counter.objects.using(ALIAS).create(name=NAME, value=0)
    seed = int(os.environ.get("BGTASKS_TORTURE_SEED") or random.SystemRandom().randrange(10**6))
    directory = Path(tempfile.mkdtemp(prefix="bgtasks-torture-"))
    config = {
        "name": NAME,
        "ttl": TTL,
        "workers": WORKERS,
        "seconds": SECONDS,
        "seed": seed,
        "directory": str(directory),
        "pgdata": str(embedded_postgres.pgdata),
        "pg_user": embedded_postgres.system_user,
        "restarts": max(1, round(SECONDS / 300)),
    }
    began = time.monotonic()
    with (directory / "chaos.log").open("w") as log:
        chaos = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.torture.chaos", json.dumps(config)],
            env=worker_env(ALIAS),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            returncode = chaos.wait(timeout=SECONDS + 300)
        finally:
            if chaos.poll() is None:
                chaos.kill()
    assert returncode == 0, (directory / "chaos.log").read_text()[-5000:]
    elapsed = time.monotonic() - began

    # The database was restarted under this process's connection too.
    connections[ALIAS].close()
    # Every worker has stopped or died; a ttl later no lease may read as running.
    time.sleep(TTL + 0.2)
    objects = BackgroundTask.objects
    still_running = [state.name for state in objects.list_states() if state.running]
    # Record the runs nobody claimed again (a killed last holder) in history.
    objects.expire_stale()
    state = objects.get_state(NAME)
    evidence = Evidence(
        ttl=TTL,
        ledger=list(LedgerEntry.objects.using(ALIAS).values()),
        counter=Counter.objects.using(ALIAS).get(name=NAME).value,
        history=list(TaskRun.objects.using(ALIAS).filter(name=NAME).values()),
        last_token=state.token if state is not None else 0,
        still_running=still_running,
        journals=Evidence.journals_in(directory),
        events=Evidence.events_in(directory),
    )
    verdict = check(evidence)
    profile = "soak" if SOAK else "CI"
    report = (
        f"Torture run ({profile} profile): {WORKERS} workers, ttl {TTL:g} s, "
        f"{SECONDS:g} s of chaos, {elapsed:.0f} s in all, seed {seed}\n\n"
        f"{verdict.table()}\n"
    )
    for line in verdict.violations + verdict.inconclusive:
        report += f"\n- {line}"
    RESULTS.write_text(report + "\n")
    with capsys.disabled():
        print(f"\n\n{report}\n(journals and events in {directory})")

    assert verdict.violations == []
    assert verdict.inconclusive == []
    # The run must have done what it claims, or passing proves nothing.
    events = evidence.events
    assert sum(1 for e in events if e["kind"] == "pause" and e["token"] is not None) >= 3
    assert sum(1 for e in events if e["kind"] == "kill" and e["token"] is not None) >= 1
    assert sum(1 for e in events if e["kind"] == "restart") >= 1
    assert any(e["kind"] == "cancel" and e["done"] for e in events)
    assert any(e["kind"] == "release" and e["done"] for e in events)
    assert len(evidence.ledger) >= 100
    assert len({e["owner"] for e in evidence.ledger}) >= 4
    shutil.rmtree(directory)  # kept when the run fails, for its journals
