"""A separate lease database (issue 17, part 3): ``BGTASKS_DATABASE =
"leases"``, the site's data on ``default``, and a router whose
``allow_migrate`` keeps django_bgtasks on "leases" only and every other app
on "default" only (tests/topology/leasedb_settings.py).

Each case builds the two databases from scratch with ``migrate --database``,
runs the site in a process of its own (tests/topology/leasedb_site.py) and
then reads both databases directly:

* each app's tables are on its own database and nowhere else;
* the lease, its run history and the operator's cancel request are on
  "leases", read and written there by the runner, the admin, the JSON API and
  the ``bgtasks`` command;
* ``fence()`` refuses, naming both aliases, every transaction whose writes it
  could not guard (the data's, on "default"), and the data write of a refused
  transaction never committed;
* ``manage.py check`` explains it (bgtasks.W010).

The lease database is SQLite in one case and the suite's embedded PostgreSQL
in the other (a database of its own on that server, dropped after).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.procs import ROOT

SETTINGS = "tests.topology.leasedb_settings"
LEASE_TABLES = {
    "django_bgtasks_backgroundtask",
    "django_bgtasks_taskrun",
    "django_bgtasks_worker",
    "django_bgtasks_queuedtask",
}
DATA_TABLES = {"auth_user", "django_session", "django_content_type", "testapp_counter"}


def sqlite_db(path: Path) -> dict[str, Any]:
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)}


@contextlib.contextmanager
def postgres_db(server: Any, name: str) -> Iterator[dict[str, Any]]:
    """A database of its own on the suite's embedded PostgreSQL, dropped after."""
    import psycopg

    info = server.get_postmaster_info()
    conninfo = {"host": str(info.socket_dir), "port": info.port, "user": "postgres"}
    with psycopg.connect(dbname="postgres", autocommit=True, **conninfo) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": "postgres",
            "HOST": str(info.socket_dir),
            "PORT": str(info.port),
        }
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **conninfo) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def query(db: dict[str, Any], sql: str) -> list[tuple[Any, ...]]:
    """Read a database directly, bypassing Django and the code under test."""
    if db["ENGINE"].endswith("sqlite3"):
        with contextlib.closing(sqlite3.connect(db["NAME"])) as conn:
            return conn.execute(sql).fetchall()
    import psycopg

    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"]
    ) as conn:
        return conn.execute(sql).fetchall()


def tables(db: dict[str, Any]) -> set[str]:
    if db["ENGINE"].endswith("sqlite3"):
        rows = query(db, "SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        rows = query(db, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return {name for (name,) in rows}


def run(databases: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = SETTINGS
    env["BGTASKS_LEASEDB"] = json.dumps(databases)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("COVERAGE_PROCESS_START", None)
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(params=["sqlite", "postgres"], ids=["leases-on-sqlite", "leases-on-postgres"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    data = sqlite_db(tmp_path / "data.sqlite3")
    if request.param == "sqlite":
        yield {"default": data, "leases": sqlite_db(tmp_path / "leases.sqlite3")}
        return
    server = request.getfixturevalue("embedded_postgres")
    with postgres_db(server, f"bgtasks_leases_{os.getpid()}") as leases:
        yield {"default": data, "leases": leases}


def test_a_separate_lease_database_migrates_routes_and_refuses_unguarded_fences(
    databases: dict[str, Any],
) -> None:
    for alias in ("default", "leases"):
        done = run(databases, "-m", "django", "migrate", "--database", alias, "-v", "0")
        assert done.returncode == 0, done.stderr

    # Each app's tables are where the router put them, and only there.
    default, leases = databases["default"], databases["leases"]
    assert tables(leases) >= LEASE_TABLES
    assert not DATA_TABLES & tables(leases)
    assert tables(default) >= DATA_TABLES
    assert not LEASE_TABLES & tables(default)

    checked = run(databases, "-m", "django", "check", "--database", "default")
    assert checked.returncode == 0, checked.stderr
    assert "bgtasks.W010" in checked.stderr and "'leases'" in checked.stderr
    assert "bgtasks.E030" not in checked.stderr

    site = run(databases, "-m", "tests.topology.leasedb_site")
    assert site.returncode == 0, site.stderr
    [line] = [line for line in site.stdout.splitlines() if line.startswith("result ")]
    report = json.loads(line.split(" ", 1)[1])

    # fence() refused each transaction whose writes it could not guard,
    # naming the lease alias and the other, and took the lease database's own.
    refused = report["refused"]
    assert sorted(refused) == ["both_open", "data_transaction", "using_the_data_alias"]
    for message in refused.values():
        assert "'leases'" in message and "'default'" in message, message
    assert report["fenced_on_leases"] is True
    assert report["fenced_saying_using"] is True
    assert report["wrong_token_fence"] is False
    # The surfaces saw the lease on "leases", and the cancel reached its holder.
    assert report["admin_list"] == 200
    assert report["api_detail"] == [200, report["token"], True]
    assert report["api_list"]["job"] == report["token"]
    assert report["command_show"] == report["owner"]
    assert report["api_cancel"] == 202
    assert report["cancelled"] is True
    assert report["admin_change"] == 200 and report["admin_change_shows_run"]

    # From the databases: the refused transactions' data writes never
    # committed; the lease and its history are on "leases", ended as cancelled.
    assert query(default, "SELECT value FROM testapp_counter WHERE name = 'job'") == [(0,)]
    assert query(
        leases, "SELECT token, owner, running, outcome FROM django_bgtasks_backgroundtask"
    ) == [(report["token"], report["owner"], False, "cancelled")]
    assert query(leases, "SELECT token, owner, outcome FROM django_bgtasks_taskrun") == [
        (report["token"], report["owner"], "cancelled")
    ]
    assert query(default, "SELECT username FROM auth_user") == [("admin",)]
