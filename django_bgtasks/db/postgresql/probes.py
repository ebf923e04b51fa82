"""What the app reads of a PostgreSQL server's replication: its settings, for
the system checks (which live in :mod:`django_bgtasks.checks.database`), and
how far a standby may be behind, for the operator's reads from it
(:mod:`django_bgtasks.db.read_database`). Constant statements, run here.
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


# How old what a standby serves may be (db/read_database.py), by the
# standby's clock: 0 on a primary, and on a standby that is streaming and has
# replayed all it received; else the age of the last transaction it replayed,
# a bound that holds whatever happened since (its WAL receiver stopped, or
# replay paused or behind): the primary may have committed nothing newer.
# NULL where that is not known yet (no transaction replayed since it
# started). pg_stat_wal_receiver's status is NULL to a user without
# pg_read_all_stats: such a standby is bounded by its last replay, as one
# whose receiver stopped.
POSTGRESQL_STANDBY_LAG = """
    SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0.0
            WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn()
                AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')
                THEN 0.0
            ELSE EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8
        END
"""


@dataclass(frozen=True)
class PostgreSQLStandby:
    """How old a PostgreSQL server's data may be (0 on a primary)."""

    lag: float | None  # seconds, None when not known


def postgresql_standby(connection: BaseDatabaseWrapper) -> PostgreSQLStandby | None:
    """Read how far behind its primary this connection's server may be; None
    when it is not PostgreSQL."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(POSTGRESQL_STANDBY_LAG)
        [lag] = cursor.fetchone()
    return PostgreSQLStandby(lag=None if lag is None else max(0.0, float(lag)))
