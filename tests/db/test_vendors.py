"""The statement sets of django_bgtasks/db/: one per vendor, rendered for a
set of tables and kept, and a clear error for any other vendor. (That the
statements take values only as parameters is tested in
tests/security/test_security.py; what they do, in tests/core/test_leases.py.)"""

from __future__ import annotations

import pytest
from django.db import NotSupportedError, connections
from django.db.backends.dummy.base import DatabaseWrapper as DummyDatabaseWrapper

from django_bgtasks.db import vendors


def test_statements_are_rendered_once_per_vendor_and_set_of_tables() -> None:
    sqlite, postgres = connections["default"], connections["postgres"]
    tables = {"task": "t_render", "run": "r_render", "worker": "w_render"}
    first = vendors.statements(sqlite, **tables)
    assert vendors.statements(sqlite, **tables) is first
    assert vendors.statements(postgres, **tables) is not first
    assert vendors.statements(sqlite, **{**tables, "run": "other"}) is not first
    # The table names are quoted by the connection, and nothing is left to fill in.
    assert 'INSERT INTO "t_render" AS t' in first.claim
    assert 'FROM "r_render"' in first.claim
    assert 'INSERT INTO "w_render" AS w' in first.worker_beat
    assert "{" not in first.claim and "}" not in first.claim


def test_a_database_without_lease_sql_is_a_clear_error() -> None:
    """System check E001 reports it at start-up; a caller that runs anyway gets
    NotSupportedError naming the database, before any SQL is sent."""
    other = DummyDatabaseWrapper({**connections["default"].settings_dict}, alias="legacy")
    with pytest.raises(
        NotSupportedError, match=r"postgresql, sqlite and mysql, not 'unknown'.*'legacy'"
    ):
        vendors.statements(other, task="t", run="r", worker="w")


def test_the_queue_statements_are_rendered_once_and_only_where_the_queue_runs() -> None:
    """The queue's statements share the one render cache with the lease
    statements; MySQL/MariaDB has no queue yet (bgtasks.E015)."""
    sqlite = connections["default"]
    first = vendors.queue_statements(sqlite, table="q_render")
    assert vendors.queue_statements(sqlite, table="q_render") is first
    assert 'UPDATE "q_render" SET' in first.claim and "'RUNNING'" in first.claim
    assert "{" not in first.claim and "}" not in first.claim
    assert vendors.QUEUE_VENDORS == ("postgresql", "sqlite")
    other = DummyDatabaseWrapper({**connections["default"].settings_dict}, alias="legacy")
    other.vendor = "mysql"
    with pytest.raises(NotSupportedError, match=r"PostgreSQL and SQLite, not 'mysql'.*'legacy'"):
        vendors.queue_statements(other, table="q")
