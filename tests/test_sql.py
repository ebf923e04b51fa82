"""The statement sets of django_bgtasks/sql.py: one per vendor, rendered for a
set of tables and kept, and a clear error for any other vendor. (That the
statements take values only as parameters is tested in
tests/security/test_security.py; what they do, in tests/test_leases.py.)"""

from __future__ import annotations

import pytest
from django.db import NotSupportedError, connections
from django.db.backends.dummy.base import DatabaseWrapper as DummyDatabaseWrapper

from django_bgtasks import sql as lease_sql


def test_statements_are_rendered_once_per_vendor_and_set_of_tables() -> None:
    sqlite, postgres = connections["default"], connections["postgres"]
    tables = {"task": "t_render", "run": "r_render", "worker": "w_render"}
    first = lease_sql.statements(sqlite, **tables)
    assert lease_sql.statements(sqlite, **tables) is first
    assert lease_sql.statements(postgres, **tables) is not first
    assert lease_sql.statements(sqlite, **{**tables, "run": "other"}) is not first
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
        lease_sql.statements(other, task="t", run="r", worker="w")
