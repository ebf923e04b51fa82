"""``bgtasks health`` (operations/health.py's rule, through the command): as a
real process against a database that is down and one without the
migrations, and in this process for ``--workers`` and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_bgtasks.models import BackgroundTask
from tests.asgiserver import free_port
from tests.dbtools import app_migrations, backdate_worker
from tests.procs import ENV_DB, ROOT, worker_env

objects = BackgroundTask.objects


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
