"""What the database checks read from a MySQL/MariaDB server
(db/mysql/probes.py), read from the suite's MariaDB: which server it is and
its version, its session's settings and the storage engines of the lease
tables, each in its own field; nothing from another engine. (What the checks
make of them: tests/checks/test_database.py.)"""

from __future__ import annotations

from django.db import connections

from django_bgtasks.db.mysql.leases import MIN_MARIADB_VERSION, MIN_MYSQL_VERSION
from django_bgtasks.db.mysql.probes import MySQLIdentity, mysql_identity, mysql_server
from django_bgtasks.models import BackgroundTask, TaskRun, Worker

TABLES = {
    "task": BackgroundTask._meta.db_table,
    "run": TaskRun._meta.db_table,
    "worker": Worker._meta.db_table,
}


def test_the_identity_is_the_server_django_read_and_its_minimum(mysql_alias: str) -> None:
    connection = connections[mysql_alias]
    connection.ensure_connection()
    identity = mysql_identity(connection)
    if connection.mysql_is_mariadb:
        expected = MySQLIdentity("MariaDB", connection.mysql_version, MIN_MARIADB_VERSION)
    else:
        expected = MySQLIdentity("MySQL", connection.mysql_version, MIN_MYSQL_VERSION)
    assert identity == expected
    assert identity.version >= identity.minimum  # the suite's server is supported


def test_another_engine_has_no_mysql_identity(sqlite_alias: str) -> None:
    assert mysql_identity(connections[sqlite_alias]) is None


def test_the_server_reads_the_sessions_settings_and_the_lease_tables_engines(
    mysql_alias: str,
) -> None:
    connection = connections[mysql_alias]
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@session.sql_mode, @@global.system_time_zone")
        sql_mode, system_time_zone = cursor.fetchone()
        cursor.execute("SET time_zone = '+02:00'")
    try:
        server = mysql_server(connection, **TABLES)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
    assert server.time_zone == "+02:00"  # the session's, not the server's
    assert (server.system_time_zone, server.sql_mode) == (system_time_zone, sql_mode)
    assert server.engines == sorted((table, "InnoDB") for table in TABLES.values())
    assert server.sysdate_moves  # the suite's server runs without --sysdate-is-now
    assert isinstance(server.log_bin, bool) and server.binlog_format


def test_the_server_reads_the_engine_of_each_table_it_is_given(mysql_alias: str) -> None:
    connection = connections[mysql_alias]
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TABLES['worker']} ENGINE=MyISAM")
    try:
        server = mysql_server(connection, **TABLES)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {TABLES['worker']} ENGINE=InnoDB")
    assert dict(server.engines) == {
        TABLES["task"]: "InnoDB",
        TABLES["run"]: "InnoDB",
        TABLES["worker"]: "MyISAM",
    }
    # A table not asked about is not read: two of the three.
    only = mysql_server(connection, task=TABLES["task"], run=TABLES["run"], worker="nope")
    assert [table for table, _engine in only.engines] == sorted([TABLES["task"], TABLES["run"]])
