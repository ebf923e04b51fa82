"""What the system checks read from a PostgreSQL server: its replication
settings. A constant statement, run here (the checks themselves live in
:mod:`django_bgtasks.checks.database`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.backends.base.base import BaseDatabaseWrapper

# What the replication check reads from the lease database's PostgreSQL
# (checks/database.py): whether this is a standby, the primary's synchronous
# standbys as configured and as connected, and this session's
# synchronous_commit. A user without pg_monitor (or pg_read_all_stats) sees
# pg_stat_replication's rows with sync_state NULL: counted apart, so the
# check can say so.
POSTGRESQL_REPLICATION = """
    SELECT pg_is_in_recovery(),
        current_setting('synchronous_standby_names'),
        current_setting('synchronous_commit'),
        (SELECT count(*) FROM pg_stat_replication WHERE sync_state = ANY(%(sync_states)s)),
        (SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL)
"""
# The sync_state of a standby whose flush a commit waits for.
SYNC_STATES = ["sync", "quorum"]


@dataclass(frozen=True)
class PostgreSQLReplication:
    """What the replication check needs to know of a PostgreSQL server."""

    in_recovery: bool
    synchronous_standby_names: str
    synchronous_commit: str
    sync_standbys: int  # connected, and waited for by commits
    hidden_standbys: int  # connected, but this user can't see their sync_state


def postgresql_replication(connection: BaseDatabaseWrapper) -> PostgreSQLReplication | None:
    """Read this connection's server's replication settings; None when it is
    not PostgreSQL."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(POSTGRESQL_REPLICATION, {"sync_states": SYNC_STATES})
        in_recovery, names, commit, sync, hidden = cursor.fetchone()
    return PostgreSQLReplication(
        in_recovery=bool(in_recovery),
        synchronous_standby_names=str(names),
        synchronous_commit=str(commit),
        sync_standbys=int(sync),
        hidden_standbys=int(hidden),
    )
