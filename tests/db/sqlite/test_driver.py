"""How SQLite runs the statements (db/sqlite/driver.py): a time as the naive
UTC text Django stores; a statement one each, but the one of several steps
(``renew_many``), whose steps run in one transaction, every step's rows
handed back, none written when one fails; and the SQLite library this
process links, old enough or not. (Its ends and claim, one after the
other: tests/queue/test_manager.py.)"""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest
from django.db import OperationalError, ProgrammingError, connections

from django_bgtasks.db.sqlite import driver as sqlite_driver
from django_bgtasks.db.sqlite.driver import DRIVER
from django_bgtasks.db.sqlite.leases import MIN_SQLITE_VERSION, STEP
from django_bgtasks.models import QueuedTask
from tests import djtasks


def test_a_time_is_utc_text_to_the_millisecond(sqlite_alias: str) -> None:
    at = dt.datetime(2026, 1, 2, 8, 34, 5, 678901, tzinfo=dt.timezone(dt.timedelta(hours=5.5)))
    text = DRIVER.time_param(at)
    assert text == "2026-01-02 03:04:05.678"
    # The database reads it as the instant it is.
    rows = DRIVER.run(
        connections[sqlite_alias],
        "clock",
        "SELECT (julianday(%(at)s) - julianday('2026-01-02 03:04:05')) * 86400000 AS ms",
        {"at": text},
        queue=False,
    )
    assert rows[0]["ms"] == pytest.approx(678, abs=0.1)


def test_the_steps_of_a_statement_run_in_one_transaction(sqlite_alias: str) -> None:
    connection = connections[sqlite_alias]
    seq = QueuedTask.objects.using(sqlite_alias).get(uuid=djtasks.add.enqueue(1, 2).id).seq
    table = connection.ops.quote_name(QueuedTask._meta.db_table)
    write = f"UPDATE {table} SET priority = 9 RETURNING seq, priority"
    rows = DRIVER.run(
        connection, "renew_many", f"{write}{STEP}SELECT 'read' AS n", {}, queue=False
    )
    assert rows == [{"seq": seq, "priority": 9}, {"n": "read"}]
    # A step that fails takes back the ones before it.
    broken = f"{write.replace('9', '1')}{STEP}UPDATE bgtasks_no_such_table SET n = 1"
    with pytest.raises(OperationalError, match="no such table"):
        DRIVER.run(connection, "renew_many", broken, {}, queue=False)
    assert list(QueuedTask.objects.using(sqlite_alias).values_list("priority", flat=True)) == [9]
    # Another statement is one, sent whole: SQLite refuses two in one.
    with pytest.raises(ProgrammingError, match="one statement at a time"):
        DRIVER.run(connection, "renew", f"SELECT 1{STEP}SELECT 2", {}, queue=False)


def test_the_sqlite_library_is_checked_against_the_oldest_the_statements_need(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bgtasks.E004's question (tests/checks/test_database.py has its message)."""
    assert DRIVER.client_too_old() is (sqlite3.sqlite_version_info < MIN_SQLITE_VERSION)
    monkeypatch.setattr(sqlite_driver.sqlite3, "sqlite_version_info", MIN_SQLITE_VERSION)
    assert DRIVER.client_too_old() is False
    older = (MIN_SQLITE_VERSION[0], MIN_SQLITE_VERSION[1] - 1, 99)
    monkeypatch.setattr(sqlite_driver.sqlite3, "sqlite_version_info", older)
    assert DRIVER.client_too_old() is True
