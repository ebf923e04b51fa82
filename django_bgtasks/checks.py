"""System checks for the ``BGTASKS_*`` settings and the lease database.

The ordinary checks connect to no database: the vendor comes from the ENGINE,
and SQLite's version from the library Python links against. The MySQL/MariaDB
server's own settings can only be read from the server, so
:func:`check_mysql_server` is a database check, as Django's own MySQL checks
are: ``migrate`` runs it, and ``check --database ALIAS``.
"""

from __future__ import annotations

import difflib
import sqlite3
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections, router
from django.utils.module_loading import import_string

from django_bgtasks.conf import EXECUTORS, PREFIX, SETTING_NAMES, conf, lease_backends
from django_bgtasks.db.mysql import MIN_MARIADB_VERSION, MIN_MYSQL_VERSION
from django_bgtasks.db.probes import mysql_server, postgresql_replication
from django_bgtasks.db.sqlite import MIN_SQLITE_VERSION
from django_bgtasks.db.vendors import SUPPORTED_VENDORS, vendor_list
from django_bgtasks.limits import MAX_TTL, MIN_TTL
from django_bgtasks.validation import is_finite_number, max_value_bytes


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


@register()
def check_timing(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E005 (bad ``BGTASKS_TTL``), E002 (heartbeat interval not below
    ttl/2, of ``BGTASKS_TTL``, of a registered task's own ttl, or of a
    ``LeaseBackend``'s ``OPTIONS["TTL"]``)."""
    from django_bgtasks.background.functions import registered_tasks

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
    if interval is None:
        return []
    # Each task's own ttl too: registering one reads no setting (its module is
    # imported at start-up), so this is where a ttl the interval does not fit
    # is said, before its first run refuses to start.
    messages: list[CheckMessage] = [
        Error(
            f"BGTASKS_HEARTBEAT_INTERVAL is {interval!r}; the task {name!r} has a ttl of "
            f"{task.ttl:g} s, so it must be below {task.ttl / 2:g} s.",
            hint=(
                "Lower BGTASKS_HEARTBEAT_INTERVAL, leave it unset (None) to renew every "
                "ttl/3, or give the task a longer ttl."
            ),
            id="bgtasks.E002",
        )
        for name, task in registered_tasks().items()
        if task.ttl is not None and interval >= task.ttl / 2
    ]
    # The Django Tasks a worker claims are renewed with the same interval
    # (queued.py), against the ttl their backend gave them. (A TTL that is not
    # a number of seconds is the backend's own check, bgtasks.E016.)
    for alias, params in lease_backends().items():
        options = params.get("OPTIONS")
        backend_ttl = options.get("TTL") if isinstance(options, dict) else None
        if is_finite_number(backend_ttl) and backend_ttl > 0 and interval >= backend_ttl / 2:
            messages.append(
                Error(
                    f"BGTASKS_HEARTBEAT_INTERVAL is {interval!r}; TASKS[{alias!r}] gives its "
                    f'tasks a TTL of {backend_ttl:g} s (OPTIONS["TTL"]), so it must be below '
                    f"{backend_ttl / 2:g} s.",
                    hint=(
                        "Lower BGTASKS_HEARTBEAT_INTERVAL, leave it unset (None) to renew every "
                        'ttl/3, or raise the backend\'s OPTIONS["TTL"].'
                    ),
                    id="bgtasks.E002",
                )
            )
    return messages


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
def check_max_value_bytes(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E019 (``BGTASKS_MAX_VALUE_BYTES`` not a whole number of bytes above 0)."""
    try:
        max_value_bytes()  # the rule the lease operations apply
    except TypeError:
        return [
            Error(
                f"BGTASKS_MAX_VALUE_BYTES is {conf.MAX_VALUE_BYTES!r}; it must be a whole "
                "number of bytes above 0.",
                hint=(
                    "The default is 1048576 (1 MiB); write 1 << 20 or 1_048_576, not a "
                    'string such as "1MB". Values larger than it are refused, and results '
                    "larger than it are not stored."
                ),
                id="bgtasks.E019",
            )
        ]
    return []


@register()
def check_setting_names(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.W006 (a ``BGTASKS_*`` setting the app does not read: a misspelling,
    which would otherwise leave the default in force without a word)."""
    known = [name.removeprefix(PREFIX) for name in SETTING_NAMES]
    messages: list[CheckMessage] = []
    for name in sorted(dir(settings)):
        if not name.startswith(PREFIX) or name in SETTING_NAMES:
            continue
        # Compared without the prefix, which every name shares and which
        # would make any two of them look alike.
        close = difflib.get_close_matches(name.removeprefix(PREFIX), known, n=1)
        hint = f"Did you mean {PREFIX}{close[0]}? " if close else ""
        messages.append(
            Warning(
                f"{name} is not a django-bgtasks setting, so it changes nothing.",
                hint=f"{hint}The settings are listed in docs/settings.md.",
                id="bgtasks.W006",
            )
        )
    return messages


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
    from django_bgtasks.background.functions import registered_tasks
    from django_bgtasks.background.schedules import parse_schedule

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
    vendor = connections[alias].vendor
    if vendor != "postgresql":
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
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return []  # bgtasks.E034
    found = postgresql_replication(connection)
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
