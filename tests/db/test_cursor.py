"""The lease statements as prepared statements on PostgreSQL (db/cursor.py), on
the connection Django opened, still seen by Django's cursor machinery; and
prepared only where the connection proved it talks to its backend directly,
not through a pooler (the transaction-pooling PgBouncer with Django's default
settings: tests/db/test_pgbouncer.py has its pool modes)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import DatabaseError, connections
from django.test.utils import CaptureQueriesContext

from django_bgtasks.checks.database import check_prepared_statements
from django_bgtasks.db import cursor as db_cursor
from django_bgtasks.models import BackgroundTask
from tests.tools import needs_pgbouncer

objects = BackgroundTask.objects


def prepared_statements(alias: str) -> list[str]:
    """The statements this session has prepared, as the server lists them."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@contextlib.contextmanager
def connection_settings(alias: str, **changes: Any) -> Iterator[Any]:
    """``alias``'s connection with ``changes`` to its settings for the block,
    on a session of its own (closed before and after)."""
    connection = connections[alias]
    connection.close()
    saved = dict(connection.settings_dict)
    connection.settings_dict.update(changes)
    try:
        yield connection
    finally:
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
        connection.close()


def cycle(name: str) -> None:
    lease = objects.try_claim(name, "a", {"n": 0}, ttl=30)
    assert lease is not None
    assert objects.update_state(name, "a", {"n": 1}, token=lease.token)
    assert objects.release(name, "a", {"n": 2}, token=lease.token)


def transaction_pooled(alias: str) -> bool:
    return bool(django_settings.PGBOUNCER_ALIASES.get(alias) == "transaction")


def test_the_lease_statements_are_prepared_by_default(pg_direct_alias: str) -> None:
    connections[pg_direct_alias].close()  # a session of this test's own
    cycle("prepared")
    cycle("prepared")  # the first claim ran before the session was proved
    statements = prepared_statements(pg_direct_alias)
    table = BackgroundTask._meta.db_table
    assert any(f'INSERT INTO "{table}"' in text for text in statements)  # the claim
    assert any("SET updated_at = clock_timestamp(), value" in text for text in statements)
    assert any("WITH ended AS" in text for text in statements)  # the release
    # Nothing else: Django's own queries (the read above included) are not.
    assert all(table in text for text in statements)
    list(BackgroundTask.objects.using(pg_direct_alias).filter(name="prepared"))
    assert len(prepared_statements(pg_direct_alias)) == len(statements)


@pytest.mark.parametrize(
    ("setting", "database"),
    [(False, {}), (None, {"DISABLE_SERVER_SIDE_CURSORS": True})],
    ids=["setting-false", "transaction-pooling"],
)
def test_not_prepared_when_turned_off(
    pg_direct_alias: str, settings: Any, setting: Any, database: dict[str, Any]
) -> None:
    settings.BGTASKS_PREPARED_STATEMENTS = setting
    with connection_settings(pg_direct_alias, **database) as connection:
        assert not db_cursor.prepares(connection)
        cycle("unprepared")
        assert prepared_statements(pg_direct_alias) == []


def test_forced_on_even_with_transaction_pooling(pg_direct_alias: str, settings: Any) -> None:
    settings.BGTASKS_PREPARED_STATEMENTS = True
    with connection_settings(pg_direct_alias, DISABLE_SERVER_SIDE_CURSORS=True) as connection:
        assert db_cursor.prepares(connection)


def test_django_sees_them_query_log_and_execute_wrapper(pg_direct_alias: str) -> None:
    connection = connections[pg_direct_alias]
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as logged, connection.execute_wrapper(wrapper):
        cycle("watched")
    assert len(seen) == 3 and len(logged.captured_queries) == 3
    assert "INSERT INTO" in seen[0] and "WITH ended AS" in seen[2]
    # The log shows the statement with its values, as for Django's own.
    assert "'watched'" in logged.captured_queries[0]["sql"]


def test_driver_errors_are_django_errors(pg_direct_alias: str) -> None:
    connection = connections[pg_direct_alias]
    cycle("errors")
    # A statement the server refuses: Django's DatabaseError, from the same cursor.
    cursor = db_cursor.prepared_cursor(connection)
    with pytest.raises(DatabaseError):
        cursor.execute("SELECT 1 / 0")
    cycle("errors")  # and the cursor, and the connection, go on working


def test_a_reconnect_gets_a_new_cursor(pg_direct_alias: str) -> None:
    connection = connections[pg_direct_alias]
    cycle("reconnect")
    before = db_cursor.prepared_cursor(connection).cursor
    connection.close()
    cycle("reconnect")
    after = db_cursor.prepared_cursor(connection).cursor
    assert after is not before and after.connection is connection.connection
    assert prepared_statements(pg_direct_alias)  # prepared again on the new session


def test_the_site_keeps_its_own_prepare_threshold(pg_direct_alias: str) -> None:
    options = {**connections[pg_direct_alias].settings_dict["OPTIONS"], "prepare_threshold": 7}
    with connection_settings(pg_direct_alias, OPTIONS=options) as connection:
        cycle("threshold")
        assert connection.connection.prepare_threshold == 7
        assert prepared_statements(pg_direct_alias)


def test_prepared_on_postgresql_only_and_not_behind_transaction_pooling(db_alias: str) -> None:
    """With Django's default settings everywhere (the PgBouncer's included):
    the app finds the pooler out by itself."""
    connection = connections[db_alias]
    connection.close()
    assert not db_cursor.prepares(connection)  # a new connection's first statement
    cycle("proof")  # its second proves the session, once
    expected = connection.vendor == "postgresql" and not transaction_pooled(db_alias)
    assert db_cursor.prepares(connection) == expected
    cycle("proof")  # and on it goes, prepared or not
    if connection.vendor == "postgresql":
        assert bool(prepared_statements(db_alias)) == expected


def test_a_session_is_direct_only_without_a_pooler_between(pg_alias: str) -> None:
    """By the connection's own socket: TCP to DATABASE_URL's server and to
    the PgBouncer, a Unix socket to the embedded one."""
    connection = connections[pg_alias]
    connection.ensure_connection()
    assert db_cursor.direct_session(connection.connection) == (not transaction_pooled(pg_alias))


def test_one_statement_alone_on_a_connection_is_not_prepared_and_proves_nothing(
    pg_direct_alias: str,
) -> None:
    """What a web request under CONN_MAX_AGE = 0 does: one lease statement on
    a new connection. Preparing it would gain nothing, nor would a proof."""
    connection = connections[pg_direct_alias]
    connection.close()
    assert objects.try_claim("alone", "a", ttl=30) is not None
    assert prepared_statements(pg_direct_alias) == []


def test_inside_the_callers_transaction_nothing_is_proved(pg_direct_alias: str) -> None:
    from django.db import transaction

    connection = connections[pg_direct_alias]
    connection.close()
    lease = objects.try_claim("inside", "a", ttl=30)  # the connection's first
    assert lease is not None
    with transaction.atomic(using=pg_direct_alias):
        assert objects.fence("inside", "a", lease.token)
        assert objects.fence("inside", "a", lease.token)
        assert prepared_statements(pg_direct_alias) == []


@needs_pgbouncer
@pytest.mark.django_db(transaction=True, databases=["postgres", "pgbouncer"])
def test_a_pooled_connection_says_once_that_it_runs_unprepared(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(db_cursor, "_said", set())
    connection = connections["pgbouncer"]
    with caplog.at_level(logging.WARNING, logger="django_bgtasks.cursors"):
        for _ in range(3):
            connection.close()
            assert not db_cursor.prepares(connection)
            connection.ensure_connection()
            assert not db_cursor.prepares(connection)
    [record] = caplog.records
    assert "'pgbouncer'" in record.getMessage() and "unprepared" in record.getMessage()


@pytest.mark.parametrize("value", ["yes", 1, 0, []])
def test_a_bad_setting(settings: Any, value: Any) -> None:
    settings.BGTASKS_PREPARED_STATEMENTS = value
    [error] = check_prepared_statements()
    assert error.id == "bgtasks.E017" and repr(value) in error.msg


@pytest.mark.parametrize("value", [None, True, False])
def test_good_settings(settings: Any, value: Any) -> None:
    settings.BGTASKS_PREPARED_STATEMENTS = value
    assert check_prepared_statements() == []


def test_forced_on_behind_transaction_pooling_warns(settings: Any) -> None:
    settings.BGTASKS_PREPARED_STATEMENTS = True
    databases = {**settings.DATABASES}
    databases["default"] = {**databases["default"], "DISABLE_SERVER_SIDE_CURSORS": True}
    with pytest.warns(UserWarning, match="Overriding setting DATABASES"):
        settings.DATABASES = databases
    [warning] = check_prepared_statements()
    assert warning.id == "bgtasks.W005" and "1.21" in warning.msg
    assert "max_prepared_statements" in warning.hint
