"""What ``bgtasks`` says, each in one line, from real processes (issue 50):
the first SIGTERM or SIGINT said at once; a ``--queue`` no backend has,
refused; a lease database that DATABASES lacks, that does not answer, or
whose tables are not migrated: one line that says what to do, exit status 1,
the traceback only with ``--traceback``; ``-v 2`` and ``-v 3`` show Django's
own ``django.tasks`` lines too, with their times. (A timed-out run's late
return: tests/faults/test_retries_and_timeouts.py.)"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from django_bgtasks.conf import conf
from django_bgtasks.models import QueuedTask
from tests import djtasks
from tests.faults.harness import Workers
from tests.procs import ENV_DB, ROOT, wait_until, worker_env

GRACE = "60"
# A PostgreSQL server nobody runs: port 1 of this machine refuses at once.
NOWHERE = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": "bgtasks",
    "USER": "postgres",
    "HOST": "127.0.0.1",
    "PORT": "1",
}


def bgtasks(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py bgtasks ARGS`` in a process of its own, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "tests.procs", "bgtasks", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def on(database: dict[str, Any], **bgtasks_settings: Any) -> dict[str, str]:
    """A process's environment with ``database`` as its "default"."""
    env = worker_env("default", TASKS=settings.TASKS, **bgtasks_settings)
    env[ENV_DB] = json.dumps(database)
    return env


def said(answer: subprocess.CompletedProcess[str]) -> list[str]:
    return (answer.stdout + answer.stderr).strip().splitlines()


@pytest.fixture
def workers(sqlite_alias: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(sqlite_alias, tmp_path, args=("--poll", "0.05"), TASKS=settings.TASKS)
    yield group
    group.stop_all()


def test_the_first_signal_is_said_at_once_with_the_runs_and_the_grace(
    workers: Workers, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    result = djtasks.sleeps.enqueue(str(started), 120)  # checks nothing: ignores a stop
    worker = workers.start("--queue", "default", "--grace", GRACE)
    wait_until("the run", started.exists, timeout=60)
    worker.send_signal(signal.SIGTERM)
    line = "SIGTERM: stopping gracefully; waiting up to 60 s for 1 run(s) to end"
    wait_until("the stop said", lambda: line in workers.output(), timeout=5)
    assert worker.poll() is None  # still waiting for its run, as it said
    worker.send_signal(signal.SIGTERM)  # stops at once: the run is handed back
    assert workers.exit_status(worker, 30) == 128 + signal.SIGTERM
    row = QueuedTask.objects.using(conf.DATABASE).get(uuid=result.id)
    assert (row.status, row.attempts) == ("READY", 0)


def test_a_queue_no_backend_has_is_refused_naming_it(sqlite_alias: str) -> None:
    answer = bgtasks(
        worker_env(sqlite_alias, TASKS=settings.TASKS), "worker", "--queue", "defualt"
    )
    assert answer.returncode == 1
    assert said(answer) == [
        "CommandError: --queue 'defualt': no LeaseBackend of TASKS has such a queue "
        "(their QUEUES: default, other)."
    ]


def test_an_unmigrated_database_is_one_line_that_says_to_migrate(tmp_path: Path) -> None:
    empty = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "new.sqlite3")}
    for args in [("worker",), ("list",), ("show", "cleanup")]:
        answer = bgtasks(on(empty), *args)
        assert answer.returncode == 1, answer
        [line] = said(answer)
        assert line.startswith("CommandError: ") and "of django_bgtasks not applied" in line
        assert line.endswith("run manage.py migrate --database default"), line


def test_a_database_that_does_not_answer_is_one_line_that_names_where() -> None:
    answer = bgtasks(on(NOWHERE), "list")
    assert answer.returncode == 1
    [line] = said(answer)
    assert line.startswith("CommandError: database 'default' unreachable: 127.0.0.1:1: ")
    assert line.endswith("is the server running there?")
    # The driver's error, chained, for whoever asks.
    traced = bgtasks(on(NOWHERE), "list", "--traceback")
    assert traced.returncode == 1 and "Traceback" in traced.stderr
    assert "OperationalError" in traced.stderr


def test_a_worker_waits_for_a_database_that_does_not_answer(tmp_path: Path) -> None:
    """Started in an outage, a worker says so in a line a try and waits (it
    comes up when the database does, as a running one rides an outage out)."""
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.procs", "bgtasks", "worker", "--poll", "0.05"],
        env=on(NOWHERE),
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def output() -> str:
            return (tmp_path / "worker.log").read_text()

        wait_until("two tries said", lambda: output().count("unreachable") >= 2, timeout=30)
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        log.close()
    assert "Traceback" not in output()
    unreachable = [line for line in output().splitlines() if "unreachable" in line]
    assert all("127.0.0.1:1" in line or "retrying" in line for line in unreachable)
    assert unreachable[0].endswith("the worker retries until it answers"), unreachable


def test_a_bad_alias_is_one_line_that_names_the_aliases() -> None:
    answer = bgtasks(on(NOWHERE, BGTASKS_DATABASE="leases"), "list")
    assert answer.returncode == 1
    assert said(answer) == [
        "CommandError: BGTASKS_DATABASE 'leases' is not one of DATABASES: set it to one "
        "of 'default'"
    ]


@pytest.mark.parametrize(("verbosity", "shown"), [("1", ()), ("2", ("state",)), ("3", ("state",))])
def test_more_verbosity_shows_djangos_own_task_lines_with_their_times(
    sqlite_alias: str, verbosity: str, shown: tuple[str, ...]
) -> None:
    result = djtasks.add.enqueue(1, 2)
    env = worker_env(sqlite_alias, TASKS=settings.TASKS)
    answer = bgtasks(env, "worker", "--queue", "default", "--once", "-v", verbosity)
    assert answer.returncode == 0, answer.stderr
    django_lines = [line for line in said(answer) if f"Task id={result.id}" in line]
    # "2026-12-06 11:47:03,512 INFO django.tasks: Task id=... path=... state=SUCCESSFUL"
    stamped = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO) django[._]tasks: Task id="
    assert all(re.match(stamped, line) for line in django_lines), django_lines
    # Its start and its end (the enqueue was this process's).
    assert len(django_lines) == (2 if shown else 0), said(answer)
    assert ("state" in shown) == any("state=SUCCESSFUL" in line for line in django_lines)
