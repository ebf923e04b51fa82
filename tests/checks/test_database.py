"""The checks of the lease database (django_bgtasks/checks/database.py): its
alias, vendor and version, the read database, the routers, a MySQL/MariaDB server's settings and
PostgreSQL's synchronous replication. (Prepared statements' checks are
tests/db/test_cursor.py's and tests/db/test_pgbouncer.py's.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections

from django_bgtasks.checks import database as checks
from tests.checks.test_settings import ids


def test_an_unknown_alias(settings: Any) -> None:
    settings.BGTASKS_DATABASE = "nope"
    [error] = checks.check_database()
    assert error.id == "bgtasks.E003" and "'nope'" in error.msg and "default" in error.hint


def test_an_unsupported_vendor(settings: Any) -> None:
    # Django's dummy backend stands in for any vendor without lease SQL.
    connections.settings["other"] = {
        **connections.settings["default"],
        "ENGINE": "django.db.backends.dummy",
    }
    # Django warns that overriding DATABASES is unusual; this test means it
    # (the check only reads the alias's ENGINE) and restores it on exit.
    with pytest.warns(UserWarning, match="Overriding setting DATABASES"):
        settings.DATABASES = {**settings.DATABASES, "other": connections.settings["other"]}
    settings.BGTASKS_DATABASE = "other"
    try:
        [error] = checks.check_database()
    finally:
        del connections.settings["other"]
    assert error.id == "bgtasks.E001" and "'other' is unknown" in error.msg


def test_sqlite_older_than_3_35(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks.sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(checks.sqlite3, "sqlite_version", "3.34.1")
    [error] = checks.check_database()
    assert error.id == "bgtasks.E004" and "3.34.1" in error.msg


# --- MySQL / MariaDB: database checks, read from the server -------------------------


def mysql_checks(alias: str) -> list[str]:
    return ids(checks.check_mysql_server(databases=[alias]))


def test_the_mysql_server_of_the_test_settings_passes(mysql_alias: str) -> None:
    assert mysql_checks(mysql_alias) == []
    # Only on the lease alias, and only as a database check.
    assert checks.check_mysql_server(databases=None) == []
    assert checks.check_mysql_server(databases=["default"]) == []


def test_a_mysql_server_older_than_the_minimum(mysql_alias: str) -> None:
    connection = connections[mysql_alias]
    connection.ensure_connection()
    old = (10, 5, 9) if connection.mysql_is_mariadb else (5, 7, 44)
    # mysql_version is a cached property: an older server, as Django would read it.
    connection.__dict__["mysql_version"] = old
    try:
        [error] = checks.check_mysql_server(databases=[mysql_alias])
    finally:
        del connection.__dict__["mysql_version"]
    assert error.id == "bgtasks.E010" and ".".join(map(str, old)) in error.msg


def _session(alias: str, statement: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute(statement)


def test_a_session_time_zone_other_than_utc(mysql_alias: str) -> None:
    _session(mysql_alias, "SET time_zone = '+02:00'")
    try:
        [error] = checks.check_mysql_server(databases=[mysql_alias])
    finally:
        _session(mysql_alias, "SET time_zone = '+00:00'")
    assert error.id == "bgtasks.E011" and "'+02:00'" in error.msg
    assert "init_command" in error.hint


def test_an_sql_mode_that_breaks_the_statements(mysql_alias: str) -> None:
    connection = connections[mysql_alias]
    connection.ensure_connection()
    if not connection.mysql_is_mariadb:
        pytest.skip("EMPTY_STRING_IS_NULL is MariaDB's")
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@session.sql_mode")
        [[saved]] = cursor.fetchall()
    _session(mysql_alias, "SET sql_mode = CONCAT(@@sql_mode, ',EMPTY_STRING_IS_NULL')")
    try:
        [error] = checks.check_mysql_server(databases=[mysql_alias])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET sql_mode = %s", [saved])
    assert error.id == "bgtasks.E013" and "EMPTY_STRING_IS_NULL" in error.msg


def test_a_lease_table_that_is_not_innodb(mysql_alias: str) -> None:
    _session(mysql_alias, "ALTER TABLE django_bgtasks_worker ENGINE=MyISAM")
    try:
        [error] = checks.check_mysql_server(databases=[mysql_alias])
    finally:
        _session(mysql_alias, "ALTER TABLE django_bgtasks_worker ENGINE=InnoDB")
    assert error.id == "bgtasks.E012" and "django_bgtasks_worker" in error.msg


def test_sysdate_is_now_and_statement_based_binary_logging_are_warned_about(
    mysql_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither can be switched on at run time (both are server start options),
    so the server's answers are replaced by what such a server answers: a
    SYSDATE() that does not move, and log_bin with binlog_format=STATEMENT."""
    from django_bgtasks.db.mysql import probes

    monkeypatch.setattr(probes, "MYSQL_SYSDATE_MOVES", "SELECT SLEEP(0.01), NOW(6) < NOW(6)")
    monkeypatch.setattr(
        probes,
        "MYSQL_SERVER_SETTINGS",
        probes.MYSQL_SERVER_SETTINGS.replace("@@global.log_bin", "1").replace(
            "@@global.binlog_format", "'STATEMENT'"
        ),
    )
    assert mysql_checks(mysql_alias) == ["bgtasks.W003", "bgtasks.W004"]


class KeepsTheLeaseTablesOff:
    """A router that migrates django_bgtasks nowhere (a site's mistake)."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if app_label == "django_bgtasks" else None


def test_routers_that_keep_the_lease_tables_off_the_lease_database(settings: Any) -> None:
    settings.DATABASE_ROUTERS = ["tests.checks.test_database.KeepsTheLeaseTablesOff"]
    [error] = checks.check_separate_database()
    assert error.id == "bgtasks.E030"
    assert "'default'" in error.msg and "django_bgtasks.BackgroundTask" in error.msg
    assert "migrate --database default" in error.hint


def test_a_lease_database_other_than_default_says_what_fence_guards(settings: Any) -> None:
    settings.BGTASKS_DATABASE = "postgres"
    [warning] = checks.check_separate_database()
    assert warning.id == "bgtasks.W010"
    assert "'postgres'" in warning.msg and "FenceOnOtherDatabase" in warning.msg


def test_the_lease_table_on_default_needs_no_word() -> None:
    assert checks.check_separate_database() == []


# --- BGTASKS_REQUIRE_SYNC_REPLICATION (a primary with a synchronous standby:
# tests/faults/test_failover.py runs these against a real one) ---------------


def test_sync_replication_not_required_reads_nothing(pg_alias: str) -> None:
    assert checks.check_sync_replication(databases=[pg_alias]) == []
    assert checks.check_sync_replication_setting() == []


def test_a_primary_without_a_synchronous_standby(pg_alias: str, settings: Any) -> None:
    # The suite's servers replicate to nobody.
    settings.BGTASKS_REQUIRE_SYNC_REPLICATION = True
    assert checks.check_sync_replication_setting() == []
    [error] = checks.check_sync_replication(databases=[pg_alias])
    assert error.id == "bgtasks.E031" and "synchronous_standby_names is empty" in error.msg
    assert "ALTER SYSTEM SET synchronous_standby_names" in error.hint


def test_a_session_whose_commits_do_not_wait_for_the_standby(pg_alias: str, settings: Any) -> None:
    settings.BGTASKS_REQUIRE_SYNC_REPLICATION = True
    connection = connections[pg_alias]
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = local")
    try:
        found = ids(checks.check_sync_replication(databases=[pg_alias]))
    finally:
        connection.close()  # the next test gets a session of the server's settings
    assert found == ["bgtasks.E031", "bgtasks.E032"]


def test_sync_replication_required_of_a_database_that_is_not_postgresql(
    sqlite_alias: str, settings: Any
) -> None:
    settings.BGTASKS_REQUIRE_SYNC_REPLICATION = True
    [error] = checks.check_sync_replication_setting()
    assert error.id == "bgtasks.E034" and "sqlite" in error.msg
    assert checks.check_sync_replication(databases=[sqlite_alias]) == []


def test_a_require_sync_replication_that_is_not_a_bool(settings: Any) -> None:
    settings.BGTASKS_REQUIRE_SYNC_REPLICATION = "yes"
    [error] = checks.check_sync_replication_setting()
    assert error.id == "bgtasks.E035" and "'yes'" in error.msg


# --- BGTASKS_READ_DATABASE and BGTASKS_READ_MAX_LAG (tests/operations/
# test_read_database.py reads a real replica) -------------------------------


def test_no_read_database_needs_no_word() -> None:
    assert checks.check_read_database() == []


def test_a_read_database_that_is_no_alias(settings: Any) -> None:
    settings.BGTASKS_READ_DATABASE = "replicaa"
    [error] = checks.check_read_database()
    assert error.id == "bgtasks.E036" and "'replicaa'" in error.msg and "'default'" in error.hint


def test_a_read_database_that_is_not_even_a_name(settings: Any) -> None:
    settings.BGTASKS_READ_DATABASE = ["replica"]
    [error] = checks.check_read_database()
    assert error.id == "bgtasks.E036"


def test_a_read_database_of_another_vendor(settings: Any) -> None:
    settings.BGTASKS_READ_DATABASE = "postgres"  # BGTASKS_DATABASE is SQLite's "default"
    [error] = checks.check_read_database()
    assert error.id == "bgtasks.E037"
    assert "'postgres' is postgresql" in error.msg and "'default' is sqlite" in error.msg


def test_a_read_database_of_the_same_vendor_passes(settings: Any) -> None:
    settings.BGTASKS_DATABASE = "postgres"
    settings.BGTASKS_READ_DATABASE = "replica"  # (the check connects to neither)
    assert checks.check_read_database() == []


@pytest.mark.parametrize("limit", [-1, float("nan"), "10", True])
def test_a_bad_read_max_lag(settings: Any, limit: Any) -> None:
    settings.BGTASKS_READ_MAX_LAG = limit
    [error] = checks.check_read_database()
    assert error.id == "bgtasks.E038" and repr(limit) in error.msg


@pytest.mark.parametrize("limit", [None, 0, 2.5])
def test_a_read_max_lag_that_passes(settings: Any, limit: Any) -> None:
    settings.BGTASKS_READ_MAX_LAG = limit
    assert checks.check_read_database() == []
