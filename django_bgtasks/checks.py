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

from .conf import conf
from .sql import MIN_SQLITE_VERSION, SUPPORTED_VENDORS
from .validation import MAX_TTL, is_finite_number


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
    if not is_finite_number(ttl) or not 0 < ttl <= MAX_TTL:
        return [
            Error(
                f"BGTASKS_TTL is {ttl!r}; it must be a number of seconds above 0 and at "
                f"most {MAX_TTL:g}.",
                hint="The default is 120.",
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
