"""System checks of the lease database (``BGTASKS_DATABASE``): its alias,
vendor and version, the read database's alias and vendor, the routers,
prepared statements, a MySQL/MariaDB server's settings, and PostgreSQL's
synchronous replication.

The ordinary checks connect to no database: the vendor comes from the ENGINE,
and SQLite's version from the library Python links against. The MySQL/MariaDB
server's own settings can only be read from the server, so
:func:`check_mysql_server` is a database check, as Django's own MySQL checks
are: ``migrate`` runs it, and ``check --database ALIAS``; so is
:func:`check_sync_replication`.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections, router

from django_bgtasks.conf import conf
from django_bgtasks.db.engines import driver_or_none, vendor_list
from django_bgtasks.db.mysql.probes import mysql_identity, mysql_server
from django_bgtasks.db.postgresql.probes import postgresql_replication
from django_bgtasks.db.sqlite.leases import MIN_SQLITE_VERSION
from django_bgtasks.validation import is_finite_number


@register()
def check_database(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E003 (unknown alias), E001 (unsupported vendor), E004 (old SQLite)."""
    alias = conf.DATABASE
    if alias not in settings.DATABASES:
        return [
            Error(
                f"BGTASKS_DATABASE is {alias!r}, which is not in DATABASES.",
                hint=f"Set BGTASKS_DATABASE to one of {sorted(settings.DATABASES)}.",
                id="bgtasks.E003",
            )
        ]
    engine = driver_or_none(connections[alias])
    if engine is None:
        vendor = connections[alias].vendor
        return [
            Error(
                f"The database {alias!r} is {vendor}; django-bgtasks supports "
                f"{vendor_list()} only.",
                hint="Point BGTASKS_DATABASE at a PostgreSQL, SQLite, MySQL or MariaDB database.",
                id="bgtasks.E001",
            )
        ]
    if engine.client_too_old():
        return [
            Error(
                f"SQLite {sqlite3.sqlite_version} is too old; django-bgtasks needs "
                f"{'.'.join(map(str, MIN_SQLITE_VERSION))} or newer (for RETURNING).",
                hint="Use a Python built against a newer SQLite, or PostgreSQL.",
                id="bgtasks.E004",
            )
        ]
    return []


@register()
def check_separate_database(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E030 (the routers keep the tables off ``BGTASKS_DATABASE``),
    W010 (the lease table is not on ``default``: what ``fence()`` guards)."""
    alias = conf.DATABASE
    if alias not in settings.DATABASES:
        return []  # bgtasks.E003
    messages: list[CheckMessage] = []
    refused = [
        model._meta.label
        for model in apps.get_app_config("django_bgtasks").get_models()
        if not router.allow_migrate_model(alias, model)
    ]
    if refused:
        messages.append(
            Error(
                f"BGTASKS_DATABASE is {alias!r}, but DATABASE_ROUTERS do not allow "
                f"migrating {', '.join(refused)} there, so `migrate` would never create "
                "the lease tables where the lease operations read and write them.",
                hint=(
                    f"Make your router's allow_migrate() return True for app_label "
                    f"'django_bgtasks' on {alias!r}, then run "
                    f"`manage.py migrate --database {alias}`."
                ),
                id="bgtasks.E030",
            )
        )
    if alias != "default":
        messages.append(
            Warning(
                f"The lease table is on {alias!r} (BGTASKS_DATABASE), so lease.fence() "
                f"guards only writes to {alias!r}: it raises FenceOnOtherDatabase when a "
                "transaction is open on another alias, and writes made there without a "
                "fence are not protected against a takeover.",
                hint=(
                    f"Keep the data a task fences on {alias!r}, or make the other "
                    "database's writes check lease.token (docs/reliability.md, 'A separate "
                    "lease database'). Silence this with SILENCED_SYSTEM_CHECKS = "
                    '["bgtasks.W010"] once that is so.'
                ),
                id="bgtasks.W010",
            )
        )
    return messages


# Alike the checks beside it on purpose: each has its own setting, id, message and hint.
@register()
def check_read_database(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E036 (``BGTASKS_READ_DATABASE`` is no alias), E037 (its engine
    is not ``BGTASKS_DATABASE``'s: a replica is the same vendor), E038 (bad
    ``BGTASKS_READ_MAX_LAG``)."""
    limit = conf.READ_MAX_LAG
    if limit is not None and (not is_finite_number(limit) or limit < 0):
        return [
            Error(
                f"BGTASKS_READ_MAX_LAG is {limit!r}; it must be a number of seconds, 0 or "
                "more, or None.",
                hint=(
                    "The default is 10: a replica further behind than that is not read. "
                    "None reads it however far behind it is."
                ),
                id="bgtasks.E038",
            )
        ]
    read, write = conf.READ_DATABASE, conf.DATABASE
    if read == write or write not in settings.DATABASES:
        return []  # bgtasks.E003 says what is wrong with the other
    if not isinstance(read, str) or read not in settings.DATABASES:
        return [
            Error(
                f"BGTASKS_READ_DATABASE is {read!r}, which is not in DATABASES.",
                hint=(
                    f"Set BGTASKS_READ_DATABASE to the alias of a replica of {write!r} "
                    "(BGTASKS_DATABASE), or leave it out to read from that alias itself."
                ),
                id="bgtasks.E036",
            )
        ]
    vendors = connections[read].vendor, connections[write].vendor
    if vendors[0] != vendors[1]:
        return [
            Error(
                f"BGTASKS_READ_DATABASE {read!r} is {vendors[0]}, and BGTASKS_DATABASE "
                f"{write!r} is {vendors[1]}: the operator's lists would read tables that "
                "the queue does not write.",
                hint=f"Point BGTASKS_READ_DATABASE at a replica of {write!r}.",
                id="bgtasks.E037",
            )
        ]
    return []


# Alike the checks beside it on purpose: each has its own setting, id, message and hint.
@register()
def check_prepared_statements(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E017 (bad ``BGTASKS_PREPARED_STATEMENTS``), W005 (forced on
    where the database is said to be behind transaction pooling)."""
    setting: object = conf.PREPARED_STATEMENTS  # whatever the site set
    if setting is not None and not isinstance(setting, bool):
        return [
            Error(
                f"BGTASKS_PREPARED_STATEMENTS is {setting!r}; it must be None, True or False.",
                hint="None (the default) prepares the lease statements on PostgreSQL "
                "unless the database sets DISABLE_SERVER_SIDE_CURSORS.",
                id="bgtasks.E017",
            )
        ]
    alias = conf.DATABASE
    database = settings.DATABASES.get(alias, {})
    if setting and database.get("DISABLE_SERVER_SIDE_CURSORS"):
        return [
            Warning(
                f"BGTASKS_PREPARED_STATEMENTS is True, but the database {alias!r} sets "
                "DISABLE_SERVER_SIDE_CURSORS, as sites behind a transaction-pooling "
                "PgBouncer do. PgBouncer before 1.21 can't keep prepared statements: "
                "the lease operations would fail with 'prepared statement does not exist'.",
                hint="Remove BGTASKS_PREPARED_STATEMENTS (None turns them off there), or "
                "run PgBouncer 1.21 or newer with max_prepared_statements set.",
                id="bgtasks.W005",
            )
        ]
    return []


# sql_mode flags that change what the MySQL statements mean: MariaDB's
# EMPTY_STRING_IS_NULL turns the '' they write into NULL (the columns are NOT
# NULL), and its ORACLE mode parses them as another dialect.
BREAKING_SQL_MODES = ("EMPTY_STRING_IS_NULL", "ORACLE")
UTC_ZONES = ("+00:00", "+0:00", "UTC", "Etc/UTC", "GMT", "Etc/GMT", "Universal", "Zulu")


def _version(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@register(Tags.database)
def check_mysql_server(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E010 (server too old), E011 (session time zone not UTC),
    E012 (a table not InnoDB), E013 (an sql_mode that breaks the statements),
    W003 (``--sysdate-is-now``), W004 (statement-based binary logging); on the
    ``BGTASKS_DATABASE`` alias, when it is MySQL or MariaDB."""
    alias = conf.DATABASE
    if not databases or alias not in databases or alias not in settings.DATABASES:
        return []
    # Any: mysql_version and mysql_is_mariadb are the MySQL backend's own.
    connection = connections[alias]
    identity = mysql_identity(connection)
    if identity is None:
        return []
    server, minimum = identity.server, identity.minimum
    if identity.version < minimum:
        return [
            Error(
                f"The database {alias!r} is {server} {_version(identity.version)}; "
                f"django-bgtasks needs {server} {_version(minimum)} or newer.",
                hint="Upgrade the server (MySQL 8.0+ or MariaDB 10.6+).",
                id="bgtasks.E010",
            )
        ]
    task, run, worker = (
        apps.get_model("django_bgtasks", model)._meta.db_table
        for model in ("BackgroundTask", "TaskRun", "Worker")
    )
    found = mysql_server(connection, task=task, run=run, worker=worker)
    time_zone, system_zone = found.time_zone, found.system_time_zone
    messages: list[CheckMessage] = []
    utc = time_zone in UTC_ZONES or (time_zone == "SYSTEM" and system_zone in UTC_ZONES)
    if not utc:
        messages.append(
            Error(
                f"The database {alias!r} has the session time zone {time_zone!r}"
                f"{f' ({system_zone})' if time_zone == 'SYSTEM' else ''}; the lease "
                "statements compute times with SYSDATE(), which is in the session's zone, "
                "and Django stores UTC.",
                hint="""Add "init_command": "SET time_zone = '+00:00'" to the alias's OPTIONS.""",
                id="bgtasks.E011",
            )
        )
    for table, engine in found.engines:
        if engine.lower() != "innodb":
            messages.append(
                Error(
                    f"The table {table!r} of the database {alias!r} is {engine}, not InnoDB: "
                    "the lease operations need its row locks and transactions.",
                    hint=f"ALTER TABLE {table} ENGINE=InnoDB",
                    id="bgtasks.E012",
                )
            )
    breaking = [mode for mode in found.sql_mode.split(",") if mode in BREAKING_SQL_MODES]
    if breaking:
        messages.append(
            Error(
                f"The database {alias!r} runs with sql_mode {', '.join(breaking)}, which "
                "changes what the lease statements mean.",
                hint="Remove it from sql_mode (the alias's init_command can set the session's).",
                id="bgtasks.E013",
            )
        )
    if not found.sysdate_moves:
        messages.append(
            Warning(
                f"On the database {alias!r}, SYSDATE() does not move during a statement: the "
                "server runs with --sysdate-is-now, so a claim that waited for a lock judges "
                "staleness by the time it started.",
                hint="Start the server without --sysdate-is-now; use row-based or mixed "
                "binary logging for replication instead (docs/install.md).",
                id="bgtasks.W003",
            )
        )
    if found.log_bin and found.binlog_format.upper() == "STATEMENT":
        messages.append(
            Warning(
                f"The database {alias!r} logs statements (binlog_format=STATEMENT): the lease "
                "statements use SYSDATE(), which replicas would evaluate again, differently.",
                hint="Set binlog_format=ROW (MySQL's default) or MIXED.",
                id="bgtasks.W004",
            )
        )
    return messages


# synchronous_commit levels at which a commit returns before a synchronous
# standby has flushed it: a failover to that standby can lose it.
UNSAFE_SYNCHRONOUS_COMMIT = ("off", "local", "remote_write")
SYNC_REPLICATION_DOCS = "docs/operations.md, 'A PostgreSQL failover'"


@register()
def check_sync_replication_setting(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E035 (``BGTASKS_REQUIRE_SYNC_REPLICATION`` not a bool), E034
    (asked for on a database that is not PostgreSQL)."""
    required: object = conf.REQUIRE_SYNC_REPLICATION
    if not isinstance(required, bool):
        return [
            Error(
                f"BGTASKS_REQUIRE_SYNC_REPLICATION is {required!r}; it must be True or False.",
                hint="The default is False.",
                id="bgtasks.E035",
            )
        ]
    alias = conf.DATABASE
    if not required or alias not in settings.DATABASES:
        return []
    engine = driver_or_none(connections[alias])
    if engine is None or not engine.checks_sync_replication:
        vendor = connections[alias].vendor
        return [
            Error(
                f"BGTASKS_REQUIRE_SYNC_REPLICATION is True, but the database {alias!r} is "
                f"{vendor}: django-bgtasks checks synchronous replication on PostgreSQL only.",
                hint=(
                    "Set it to False, or put the lease table on PostgreSQL "
                    f"({SYNC_REPLICATION_DOCS})."
                ),
                id="bgtasks.E034",
            )
        ]
    return []


@register(Tags.database)
def check_sync_replication(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E031 (no synchronous standby), E032 (``synchronous_commit``
    returns before the standby has the commit), E033 (connected to a
    standby); on the ``BGTASKS_DATABASE`` alias, when it is PostgreSQL and
    ``BGTASKS_REQUIRE_SYNC_REPLICATION`` is True."""
    alias = conf.DATABASE
    if conf.REQUIRE_SYNC_REPLICATION is not True:
        return []
    if not databases or alias not in databases or alias not in settings.DATABASES:
        return []
    found = postgresql_replication(connections[alias])
    if found is None:
        return []  # bgtasks.E034
    if found.in_recovery:
        return [
            Error(
                f"The database {alias!r} is a standby (in recovery): the lease operations "
                "need the primary.",
                hint=(
                    "List every server in HOST (and PORT) and add "
                    '"target_session_attrs": "read-write" to OPTIONS, so that libpq '
                    f"connects to whichever is the primary ({SYNC_REPLICATION_DOCS})."
                ),
                id="bgtasks.E033",
            )
        ]
    messages: list[CheckMessage] = []
    names = found.synchronous_standby_names.strip()
    if not names or not found.sync_standbys:
        if not names:
            problem = "its synchronous_standby_names is empty, so replication is asynchronous"
        elif found.hidden_standbys:
            problem = (
                f"synchronous_standby_names is {names!r}, but this user can't see which "
                "standbys are synchronous (pg_stat_replication.sync_state is hidden)"
            )
        else:
            problem = (
                f"synchronous_standby_names is {names!r}, but no standby it names is "
                "connected as synchronous (pg_stat_replication.sync_state)"
            )
        messages.append(
            Error(
                f"BGTASKS_REQUIRE_SYNC_REPLICATION is True, but the primary of {alias!r} has "
                f"no synchronous standby: {problem}. A failover to a standby can then lose "
                "acknowledged claims, renewals and fenced writes, and hand a token out twice.",
                hint=(
                    "On the primary: ALTER SYSTEM SET synchronous_standby_names = "
                    "'FIRST 1 (<standby application_name>)'; SELECT pg_reload_conf(); and check "
                    "that SELECT application_name, sync_state FROM pg_stat_replication shows "
                    "it 'sync'. Grant pg_monitor to the app's user if sync_state reads NULL "
                    f"({SYNC_REPLICATION_DOCS})."
                ),
                id="bgtasks.E031",
            )
        )
    if found.synchronous_commit in UNSAFE_SYNCHRONOUS_COMMIT:
        messages.append(
            Error(
                f"BGTASKS_REQUIRE_SYNC_REPLICATION is True, but the database {alias!r} "
                f"runs with synchronous_commit = {found.synchronous_commit!r}: a commit "
                "returns before the synchronous standby has flushed it, so a failover can "
                "lose it.",
                hint=(
                    "Use synchronous_commit = 'on' (the default) or 'remote_apply', on the "
                    "server and in the alias's OPTIONS "
                    f'("options": "-c synchronous_commit=on") ({SYNC_REPLICATION_DOCS}).'
                ),
                id="bgtasks.E032",
            )
        )
    return messages
