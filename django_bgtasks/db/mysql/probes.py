"""What the system checks read from a MySQL/MariaDB server: its settings and
the storage engines of the app's tables. Constant statements, run here (the
checks themselves live in :mod:`django_bgtasks.checks.database`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.mysql.leases import MIN_MARIADB_VERSION, MIN_MYSQL_VERSION


@dataclass(frozen=True)
class MySQLIdentity:
    """Which server this is, its version, and the oldest this package runs on."""

    server: str  # "MySQL" or "MariaDB"
    version: tuple[int, ...]
    minimum: tuple[int, ...]


def mysql_identity(connection: Any) -> MySQLIdentity | None:
    """Which server ``connection`` is, and its version, as Django's MySQL
    backend read them; None when it is not MySQL or MariaDB."""
    if connection.vendor != "mysql":
        return None
    if connection.mysql_is_mariadb:
        return MySQLIdentity("MariaDB", connection.mysql_version, MIN_MARIADB_VERSION)
    return MySQLIdentity("MySQL", connection.mysql_version, MIN_MYSQL_VERSION)


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
    session (:func:`mysql_identity` says whether it is one), and the storage
    engines of the tables ``task``, ``run`` and ``worker``."""
    with connection.cursor() as cursor:
        cursor.execute(MYSQL_SERVER_SETTINGS)
        time_zone, system_zone, sql_mode, log_bin, binlog_format = cursor.fetchone()
        cursor.execute(MYSQL_TABLE_ENGINES, {"task": task, "run": run, "worker": worker})
        engines = sorted((str(table), str(engine)) for table, engine in cursor.fetchall())
        cursor.execute(MYSQL_SYSDATE_MOVES)
        sysdate_moves = bool(cursor.fetchone()[1])
    # Alike db/postgresql/probes.py's on purpose: each engine's row, read into its own fields.
    return MySQLServer(
        time_zone=str(time_zone),
        system_time_zone=str(system_zone),
        sql_mode=str(sql_mode),
        log_bin=bool(log_bin),
        binlog_format=str(binlog_format),
        engines=engines,
        sysdate_moves=sysdate_moves,
    )
