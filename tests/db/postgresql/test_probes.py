"""What the replication check reads from a PostgreSQL server
(db/postgresql/probes.py), read from the suite's servers, which replicate to
nobody: not a standby, no synchronous standby named or connected, and the
session's own ``synchronous_commit``; nothing from another engine. (What the
check makes of it: tests/checks/test_database.py; against a real standby:
tests/faults/test_failover.py.)"""

from __future__ import annotations

import pytest
from django.db import connections, transaction

from django_bgtasks.db.postgresql.probes import PostgreSQLReplication, postgresql_replication


@pytest.mark.parametrize("commit", ["local", "remote_write", "on"])
def test_the_replication_of_a_server_without_standbys(pg_alias: str, commit: str) -> None:
    # SET LOCAL, in a transaction: the session's setting, on the server
    # connection the probe reads from (behind PgBouncer's transaction pooling too).
    with transaction.atomic(using=pg_alias):
        with connections[pg_alias].cursor() as cursor:
            cursor.execute(f"SET LOCAL synchronous_commit = {commit}")
        found = postgresql_replication(connections[pg_alias])
    assert found == PostgreSQLReplication(
        in_recovery=False,
        synchronous_standby_names="",
        synchronous_commit=commit,
        sync_standbys=0,
        hidden_standbys=0,
    )


def test_another_engine_has_no_replication_to_read(sqlite_alias: str) -> None:
    assert postgresql_replication(connections[sqlite_alias]) is None
