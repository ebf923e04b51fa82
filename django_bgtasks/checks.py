"""System checks for the ``BGTASKS_*`` settings and the lease database.

None of them connects to a database: the vendor comes from the ENGINE, and
SQLite's version from the library Python links against.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connections
from django.utils.module_loading import import_string

from .conf import EXECUTORS, conf
from .sql import MIN_SQLITE_VERSION, SUPPORTED_VENDORS
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
                f"{' and '.join(SUPPORTED_VENDORS)} only.",
                hint="Point BGTASKS_DATABASE at a PostgreSQL or SQLite database.",
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
