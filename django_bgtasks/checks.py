"""System checks for the ``BGTASKS_*`` settings and the lease database.

The ordinary checks connect to no database: the vendor comes from the ENGINE,
and SQLite's version from the library Python links against. The MySQL/MariaDB
server's own settings can only be read from the server, so
:func:`check_mysql_server` is a database check, as Django's own MySQL checks
are: ``migrate`` runs it, and ``check --database ALIAS``.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections
from django.utils.module_loading import import_string

from .conf import EXECUTORS, conf
from .sql import (
    MIN_MARIADB_VERSION,
    MIN_MYSQL_VERSION,
    MIN_SQLITE_VERSION,
    SUPPORTED_VENDORS,
    mysql_server,
    vendor_list,
)
from .validation import MAX_TTL, MIN_TTL, is_finite_number


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
    vendor = connections[alias].vendor
    if vendor not in SUPPORTED_VENDORS:
        return [
            Error(
                f"The database {alias!r} is {vendor}; django-bgtasks supports "
                f"{vendor_list()} only.",
                hint="Point BGTASKS_DATABASE at a PostgreSQL, SQLite, MySQL or MariaDB database.",
                id="bgtasks.E001",
            )
        ]
    if vendor == "sqlite" and sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
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
def check_timing(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E005 (bad ``BGTASKS_TTL``), E002 (heartbeat interval not below ttl/2)."""
    ttl, interval = conf.TTL, conf.HEARTBEAT_INTERVAL
    if not is_finite_number(ttl) or not MIN_TTL <= ttl <= MAX_TTL:
        return [
            Error(
                f"BGTASKS_TTL is {ttl!r}; it must be a number of seconds from {MIN_TTL:g} "
                f"to {MAX_TTL:g}.",
                hint=(
                    "The default is 120. Below 0.1 s a heartbeat and a database round trip "
                    "no longer fit in a lease."
                ),
                id="bgtasks.E005",
            )
        ]
    if interval is not None and (not is_finite_number(interval) or not 0 < interval < ttl / 2):
        return [
            Error(
                f"BGTASKS_HEARTBEAT_INTERVAL is {interval!r}; it must be above 0 and below "
                f"half of BGTASKS_TTL ({ttl / 2:g} s).",
                hint=(
                    "A heartbeat that fails once must be retried before the lease expires. "
                    "Leave it unset (None) to renew every ttl/3."
                ),
                id="bgtasks.E002",
            )
        ]
    return []


@register()
def check_progress_interval(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E014 (bad ``BGTASKS_PROGRESS_INTERVAL``)."""
    interval = conf.PROGRESS_INTERVAL
    if not is_finite_number(interval) or interval < 0:
        return [
            Error(
                f"BGTASKS_PROGRESS_INTERVAL is {interval!r}; it must be a number of seconds, "
                "0 or more.",
                hint="The default is 0.5; 0 writes every update() at once.",
                id="bgtasks.E014",
            )
        ]
    return []


@register()
def check_push(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E020 (bad ``BGTASKS_CHANGES_POLL_INTERVAL``) and bgtasks.E021
    (bad ``BGTASKS_EVENTS_KEEPALIVE``)."""
    errors: list[CheckMessage] = []
    poll = conf.CHANGES_POLL_INTERVAL
    if not is_finite_number(poll) or not 0 < poll <= 60:
        errors.append(
            Error(
                f"BGTASKS_CHANGES_POLL_INTERVAL is {poll!r}; it must be a number of seconds "
                "above 0, at most 60.",
                hint=(
                    "The default is 0.5: on SQLite and MySQL the change feed reads the "
                    "leases that often, once per process."
                ),
                id="bgtasks.E020",
            )
        )
    keepalive = conf.EVENTS_KEEPALIVE
    if not is_finite_number(keepalive) or not 0 < keepalive <= 300:
        errors.append(
            Error(
                f"BGTASKS_EVENTS_KEEPALIVE is {keepalive!r}; it must be a number of seconds "
                "above 0, at most 300.",
                hint=(
                    "The default is 15: proxies close a silent connection after 30 to 60 s, "
                    "and a stream checks its access again at each keepalive."
                ),
                id="bgtasks.E021",
            )
        )
    return errors


@register()
def check_history(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E006 (bad ``BGTASKS_HISTORY_DAYS``)."""
    days = conf.HISTORY_DAYS
    if not is_finite_number(days) or days < 0:
        return [
            Error(
                f"BGTASKS_HISTORY_DAYS is {days!r}; it must be a number of days, 0 or more.",
                hint="The default is 30.",
                id="bgtasks.E006",
            )
        ]
    return []


@register()
def check_time_zone(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.W001 (``USE_TZ = False``)."""
    if not settings.USE_TZ:
        return [
            Warning(
                "USE_TZ is False. Lease times come from the database clock in UTC, so "
                "times shown by Django will be off by your UTC offset.",
                hint="Set USE_TZ = True (Django's default).",
                id="bgtasks.W001",
            )
        ]
    return []


@register()
def check_executor(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E007 (bad ``BGTASKS_EXECUTOR``)."""
    executor = conf.EXECUTOR
    if executor not in EXECUTORS:
        return [
            Error(
                f"BGTASKS_EXECUTOR is {executor!r}; it must be one of "
                f"{', '.join(map(repr, EXECUTORS))}.",
                hint=(
                    '"thread" (the default) runs "run now" in the web process; "worker" files '
                    "a request that `manage.py bgtasks worker` performs."
                ),
                id="bgtasks.E007",
            )
        ]
    return []


@register()
def check_schedules(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E008 (a bad ``BGTASKS_SCHEDULES`` entry), W002 (one for no registered task)."""
    from .schedules import parse_schedule
    from .tasks import registered_tasks

    schedules: object = conf.SCHEDULES
    if not isinstance(schedules, dict):
        return [
            Error(
                f"BGTASKS_SCHEDULES is {type(schedules).__name__}; it must be a dict of task "
                "names to schedules.",
                hint='For example {"log-cleanup": "0 3 * * *", "sync": timedelta(minutes=5)}.',
                id="bgtasks.E008",
            )
        ]
    messages: list[CheckMessage] = []
    registered = registered_tasks()
    for name, schedule in schedules.items():
        try:
            parse_schedule(schedule)
        except (TypeError, ValueError) as exc:
            messages.append(
                Error(
                    f"BGTASKS_SCHEDULES[{name!r}]: {exc}",
                    hint="Use a datetime.timedelta above zero, a five-field cron string "
                    "(minute hour day-of-month month day-of-week), or None for no schedule.",
                    id="bgtasks.E008",
                )
            )
        if name not in registered:
            messages.append(
                Warning(
                    f"BGTASKS_SCHEDULES names {name!r}, which no @background_task registers.",
                    hint=f"Registered: {', '.join(registered) or 'none'}.",
                    id="bgtasks.W002",
                )
            )
    return messages


@register()
def check_api_authentication(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E009 (a ``BGTASKS_API_AUTHENTICATION`` entry that can't be imported)."""
    paths: object = conf.API_AUTHENTICATION
    hint = (
        "List dotted paths to callables (request) -> user | None, e.g. "
        '["django_bgtasks.authentication.signed_token"]; see docs/security.md.'
    )
    if isinstance(paths, str) or not isinstance(paths, list | tuple):
        return [
            Error(
                f"BGTASKS_API_AUTHENTICATION is {paths!r}; it must be a list of dotted paths.",
                hint=hint,
                id="bgtasks.E009",
            )
        ]
    messages: list[CheckMessage] = []
    for path in paths:
        try:
            hook = import_string(path) if isinstance(path, str) else None
        except ImportError as exc:
            problem = f"can't be imported: {exc}"
        else:
            if callable(hook):
                continue
            problem = "is not a callable" if isinstance(path, str) else "is not a dotted path"
        messages.append(
            Error(
                f"BGTASKS_API_AUTHENTICATION: {path!r} {problem}.",
                hint=hint,
                id="bgtasks.E009",
            )
        )
    return messages


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
    connection: Any = connections[alias]
    if connection.vendor != "mysql":
        return []
    server = "MariaDB" if connection.mysql_is_mariadb else "MySQL"
    minimum = MIN_MARIADB_VERSION if connection.mysql_is_mariadb else MIN_MYSQL_VERSION
    if connection.mysql_version < minimum:
        return [
            Error(
                f"The database {alias!r} is {server} {_version(connection.mysql_version)}; "
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
