"""Whether the site can work its tasks (operations/health.py): its checks in
order, asked directly on every database (the lease database one of
DATABASES, answering, migrated; the live workers counted), and through
``bgtasks health``, its probe: as a real process against a database that is
down and one without the migrations, and in this process for ``--workers``
and bad input. (The readiness view asks the same: tests/http/test_monitoring.py.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connections

from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations.health import (
    Problem,
    problem,
    required_workers,
    unapplied_migrations,
    unreachable,
)
from tests.asgiserver import free_port
from tests.dbtools import app_migrations, backdate_worker
from tests.procs import ENV_DB, ROOT, worker_env

objects = BackgroundTask.objects


# --- asked directly ---------------------------------------------------------------------


def test_a_migrated_database_that_answers_is_healthy_and_live_workers_are_counted(
    db_alias: str,
) -> None:
    assert problem() is None
    assert unapplied_migrations(db_alias) == []
    found = problem(workers=1)
    assert found == Problem(
        "0 live worker(s), fewer than the 1 required", "0 silent (no heartbeat within their ttl)"
    )
    assert str(found) == f"{found.reason}: {found.detail}" and not found.unreachable
    objects.work.beat(worker="w1", host="h", pid=1, tasks=[], concurrency=1, running=[])
    assert problem(workers=1) is None


def test_a_lease_database_not_in_databases_is_the_first_problem(settings: Any) -> None:
    settings.BGTASKS_DATABASE = "leases"
    found = problem(workers=3)  # no statement: there is no database to send it to
    assert found is not None and not found.unreachable
    assert found.reason == "BGTASKS_DATABASE 'leases' is not one of DATABASES"
    assert found.detail.startswith("set it to one of 'default'") and "'leases'" not in found.detail


def test_an_unreachable_database_says_where_it_was_looked_for_and_the_first_line(
    db_alias: str,
) -> None:
    error = OperationalError("connection refused\n\tIs the server running on that host?")
    found = unreachable(db_alias, error)
    assert found.unreachable and found.reason == f"database {db_alias!r} unreachable"
    place, _, rest = found.detail.partition(": ")
    assert rest == "connection refused; is the server running there?"
    db = connections.settings[db_alias]
    if db["ENGINE"].endswith("sqlite3"):
        assert place == f"file {db['NAME']}"
    else:
        assert place.endswith(f":{db['PORT']}") and "\n" not in found.detail


@pytest.mark.parametrize(
    ("workers", "error", "message"),
    [
        (-1, ValueError, "workers must be 0 or more, not -1."),
        (True, TypeError, "workers must be a whole number, not True."),
        (1.0, TypeError, "workers must be a whole number, not 1.0."),
        ("2", TypeError, "workers must be a whole number, not '2'."),
    ],
)
def test_a_bad_worker_count_is_refused_before_any_check(
    refusal_alias: str, workers: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        required_workers(workers)
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        problem(workers=workers)
    assert required_workers(0) == 0 and required_workers(7) == 7


# --- through bgtasks health ----------------------------------------------------------------


def health(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py bgtasks health`` in a process of its own, on tests.worker_settings."""
    return subprocess.run(
        [sys.executable, "-m", "django", "bgtasks", "health", *args],
        capture_output=True,
        text=True,
        env=env | {"DJANGO_SETTINGS_MODULE": "tests.worker_settings"},
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_healthy_exits_0(site_alias: str) -> None:
    result = health(worker_env(site_alias))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("healthy:")


def test_a_database_that_is_down_exits_1_with_the_reason(site_alias: str) -> None:
    env = worker_env(site_alias)
    closed = free_port()  # nothing listens there
    down = {"ENGINE": "django.db.backends.postgresql", "NAME": "bgtasks", "USER": "postgres"}
    env[ENV_DB] = json.dumps(down | {"HOST": "127.0.0.1", "PORT": str(closed)})
    line = one_line(health(env))
    assert line.startswith("CommandError: database 'default' unreachable: "), line
    assert str(closed) in line  # the driver's reason, for the operator


def test_a_database_without_the_migrations_exits_1_with_the_reason(
    site_alias: str, tmp_path: Path
) -> None:
    env = worker_env(site_alias)
    fresh = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "fresh.sqlite3")}
    env[ENV_DB] = json.dumps(fresh)
    line = one_line(health(env))
    assert line.startswith(
        f"CommandError: {len(app_migrations())} migration(s) of django_bgtasks not applied "
        "on database 'default': 0001_initial, 0002_lease_storage,"
    ), line
    assert line.endswith("run manage.py migrate --database default"), line


def bgtasks_health(*args: str) -> str:
    out = StringIO()
    call_command("bgtasks", "health", *args, stdout=out)
    return out.getvalue()


def test_workers_n_needs_n_live_workers(site_alias: str) -> None:
    with pytest.raises(CommandError, match=r"^0 live worker\(s\), fewer than the 1 required"):
        bgtasks_health("--workers", "1")
    beat: dict[str, Any] = {"host": "h", "tasks": [], "concurrency": 1, "running": []}
    objects.work.beat(worker="w1", pid=1, **beat)
    assert bgtasks_health("--workers", "1").startswith("healthy:")
    objects.work.beat(worker="w2", pid=2, **beat)
    backdate_worker(site_alias, "w2", 60)  # silent past its ttl: not counted
    with pytest.raises(
        CommandError,
        match=r"^1 live worker\(s\), fewer than the 2 required: 1 silent \(no heartbeat",
    ):
        bgtasks_health("--workers", "2")
    assert bgtasks_health("--workers", "0").startswith("healthy:")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("-1", "workers must be 0 or more, not -1."),
        ("x", "invalid int value: 'x'"),
        ("1.5", "invalid int value: '1.5'"),
    ],
)
def test_a_bad_worker_count_is_refused(refusal_alias: str, bad: str, message: str) -> None:
    with pytest.raises(CommandError, match=f"argument --workers: {message}"):
        bgtasks_health("--workers", bad)


def test_a_bad_worker_count_by_keyword_is_refused_too(refusal_alias: str) -> None:
    with pytest.raises(CommandError, match="workers must be 0 or more, not -1"):
        call_command("bgtasks", "health", workers=-1)
