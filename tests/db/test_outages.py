"""Riding out a database outage (db/outages.py), on real connections and
the errors their drivers raise: what counts as "can't be reached right now"
(a database that can't be connected to, a connection cut under a statement)
and what doesn't (a refused write), the retry of a call on a new connection
until it lands or its lease is lost, and which connections are dropped
between polls. (A real restart under a running task and a worker:
tests/faults/test_processes.py and tests/faults/test_workers.py.)"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import IntegrityError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend

from django_bgtasks.db import outages
from django_bgtasks.db.outages import TRANSIENT_ERRORS, Stopped
from django_bgtasks.models import Worker

logger = logging.getLogger("tests.db.test_outages")


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port of this machine that nothing listens on: bound for the test,
    so that no other process (a server another test starts) takes it, and
    not listening, so that a connect to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        yield int(probe.getsockname()[1])


def _unreachable(alias: str, tmp_path: Path, port: int) -> BaseDatabaseWrapper:
    """A connection of ``alias``'s engine to a database that isn't there: a
    server's at a port nothing listens on, SQLite's in a missing folder."""
    settings = dict(connections.settings[alias])
    if connections[alias].vendor == "sqlite":
        settings["NAME"] = str(tmp_path / "missing" / "db.sqlite3")
    else:
        settings.update(HOST="127.0.0.1", PORT=str(port))
    return load_backend(settings["ENGINE"]).DatabaseWrapper(settings, "unreachable")


def _cut(alias: str) -> None:
    """End ``alias``'s session at the server, under a statement, as a restart
    of the server or ``pg_terminate_backend`` does: the statement fails."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("SELECT CONNECTION_ID()")
            cursor.execute("KILL %s", [cursor.fetchone()[0]])
        else:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def _add_worker(alias: str) -> None:
    """Insert the worker row ``w``: a second time, its primary key refuses it."""
    at = "2024-01-01T00:00:00Z"
    Worker.objects.using(alias).create(
        id="w", host="h", pid=1, concurrency=1, started_at=at, updated_at=at
    )


def _session(alias: str) -> int:
    """The server's id of ``alias``'s session (a new one after a reconnect)."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT CONNECTION_ID()" if connection.vendor == "mysql" else "SELECT pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def test_a_database_that_cant_be_reached_is_an_outage_and_a_refused_write_is_not(
    db_alias: str, tmp_path: Path, closed_port: int
) -> None:
    unreachable = _unreachable(db_alias, tmp_path, closed_port)
    try:
        with pytest.raises(TRANSIENT_ERRORS) as down:
            unreachable.ensure_connection()
    finally:
        unreachable.close()
    said = outages.summary(down.value)
    assert said and "\n" not in said  # one line of the driver's words

    _add_worker(db_alias)
    with pytest.raises(IntegrityError) as refused:  # the same primary key again
        _add_worker(db_alias)
    assert not isinstance(refused.value, TRANSIENT_ERRORS)  # a bug: never retried


def _retried(alias: str, caplog: pytest.LogCaptureFixture) -> None:
    sessions: list[int] = []

    def call() -> int:
        if not sessions:
            sessions.append(_session(alias))
            _cut(alias)  # the first try's statement loses its connection
        sessions.append(_session(alias))
        return len(sessions)

    with caplog.at_level(logging.WARNING, logger=logger.name):
        tries = outages.retry_until_deadline(
            call,
            name="job",
            interval=0.2,
            remaining=lambda: 30.0,
            raise_if_lost=lambda: None,
            logger=logger,
        )
    # Tried again on a new session (the broken connection was closed), once.
    assert tries == 2 and sessions[0] != sessions[1]
    [warning] = [record.getMessage() for record in caplog.records]
    assert warning.startswith("job: database unreachable, retrying: "), warning


def test_an_outage_under_a_call_is_retried_on_a_new_connection_on_postgresql(
    pg_direct_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    _retried(pg_direct_alias, caplog)


def test_an_outage_under_a_call_is_retried_on_a_new_connection_on_mysql(
    mysql_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    _retried(mysql_alias, caplog)


def test_a_retry_ends_at_a_refused_write_at_a_lost_lease_and_when_told_to_stop(
    db_alias: str, tmp_path: Path, closed_port: int
) -> None:
    unreachable = _unreachable(db_alias, tmp_path, closed_port)
    tries: list[str] = []

    def retry(call: Any, *, lost_after: int = 99, stop: threading.Event | None = None) -> Any:
        tries.clear()

        def raise_if_lost() -> None:
            if len(tries) >= lost_after:
                raise LookupError("lost")

        def tried() -> Any:
            tries.append("try")
            return call()

        return outages.retry_until_deadline(
            tried,
            name="job",
            interval=0.2,
            remaining=lambda: 30.0,
            raise_if_lost=raise_if_lost,
            logger=logger,
            stop=stop,
        )

    try:
        _add_worker(db_alias)
        with pytest.raises(IntegrityError):  # a bug: raised at the first try
            retry(lambda: _add_worker(db_alias))
        assert len(tries) == 1
        with pytest.raises(LookupError, match="lost"):  # retried until the lease is lost
            retry(unreachable.ensure_connection, lost_after=3)
        assert len(tries) == 3
        stop = threading.Event()
        stop.set()
        with pytest.raises(Stopped):  # a thread that is ending waits for no retry
            retry(unreachable.ensure_connection, stop=stop)
        assert len(tries) == 1
    finally:
        unreachable.close()


def test_between_polls_a_healthy_connection_is_kept_and_a_cut_one_dropped(
    pg_direct_alias: str,
) -> None:
    """``CONN_MAX_AGE = 0`` (the suite's) would close the connection at
    every poll; it is kept while it works, and closed once an outage broke it."""
    connection = connections[pg_direct_alias]
    assert connection.settings_dict["CONN_MAX_AGE"] == 0
    session = _session(pg_direct_alias)
    outages.close_broken_connections()
    assert connection.connection is not None and _session(pg_direct_alias) == session
    with pytest.raises(TRANSIENT_ERRORS):
        _cut(pg_direct_alias)
    outages.close_broken_connections()
    assert connection.connection is None  # the next statement reconnects
    assert _session(pg_direct_alias) != session
