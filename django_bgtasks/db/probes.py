"""What the system checks read from the database server: a PostgreSQL
server's replication settings, a MySQL/MariaDB server's settings and the
storage engines of the app's tables. Constant statements, run here (the
checks themselves live in :mod:`django_bgtasks.checks.database`).
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


def postgresql_replication(connection: BaseDatabaseWrapper) -> PostgreSQLReplication:
    """Read this PostgreSQL connection's server's replication settings."""
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


# What the database checks read from a MySQL/MariaDB server (checks/database.py).
MYSQL_SERVER_SETTINGS = """
    SELECT @@session.time_zone, @@global.system_time_zone, @@session.sql_mode,
        @@global.log_bin, @@global.binlog_format
"""
MYSQL_TABLE_ENGINES = """
    SELECT table_name, engine FROM information_schema.tables
    WHERE table_schema = DATABASE() AND table_name IN (%(task)s, %(run)s, %(worker)s)
"""
# SYSDATE() is the time at execution, so it moves during a statement, unless
# the server runs with --sysdate-is-now (which no variable shows).
MYSQL_SYSDATE_MOVES = "SELECT SLEEP(0.01), TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) > 0"


@dataclass(frozen=True)
class MySQLServer:
    """What the database checks need to know of a MySQL/MariaDB server."""

    time_zone: str
    system_time_zone: str
    sql_mode: str
    log_bin: bool
    binlog_format: str
    engines: list[tuple[str, str]]
    sysdate_moves: bool


def mysql_server(
    connection: BaseDatabaseWrapper, *, task: str, run: str, worker: str
) -> MySQLServer:
    """Read the settings of this MySQL/MariaDB connection's server and
    session, and the storage engines of the tables ``task``, ``run`` and
    ``worker``."""
    with connection.cursor() as cursor:
        cursor.execute(MYSQL_SERVER_SETTINGS)
        time_zone, system_zone, sql_mode, log_bin, binlog_format = cursor.fetchone()
        cursor.execute(MYSQL_TABLE_ENGINES, {"task": task, "run": run, "worker": worker})
        engines = sorted((str(table), str(engine)) for table, engine in cursor.fetchall())
        cursor.execute(MYSQL_SYSDATE_MOVES)
        sysdate_moves = bool(cursor.fetchone()[1])
    # Alike postgresql_replication()'s on purpose: each vendor's row, read into its own fields.
    return MySQLServer(
        time_zone=str(time_zone),
        system_time_zone=str(system_zone),
        sql_mode=str(sql_mode),
        log_bin=bool(log_bin),
        binlog_format=str(binlog_format),
        engines=engines,
        sysdate_moves=sysdate_moves,
    )
