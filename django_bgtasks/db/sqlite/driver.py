"""How SQLite runs the statements: one each, but for the one operation it
can't write as one statement (run in steps, in one transaction); times as
the UTC text Django stores."""

from __future__ import annotations

import datetime as dt
import sqlite3
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.cursor import fetch_all
from django_bgtasks.db.driver import Driver
from django_bgtasks.db.rows import Row
from django_bgtasks.db.sqlite import leases
from django_bgtasks.db.sqlite.leases import MIN_SQLITE_VERSION
from django_bgtasks.db.sqlite.queue import QUEUE
from django_bgtasks.db.sqlite.schema import SCHEMA


class SQLiteDriver(Driver):
    """SQLite's driver."""

    vendor = "sqlite"
    statements = leases.STATEMENTS
    fragments = leases.FRAGMENTS
    queue = QUEUE
    schema = SCHEMA
    # One transaction for a run's ends and the next claim was measured
    # slower than two (docs/benchmarks.md).
    ends_then_claim_apart = True

    def client_too_old(self) -> bool:
        return sqlite3.sqlite_version_info < MIN_SQLITE_VERSION

    def time_param(self, value: dt.datetime) -> str:
        """Naive UTC text in the format the statements store."""
        return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")

    # (Its signature alike Driver.run's: an override.)
    def run(
        self,
        connection: BaseDatabaseWrapper,
        statement: str,
        query: str,
        params: dict[str, Any],
        *,
        queue: bool,
    ) -> list[Row]:
        if statement in _STEPPED:
            return _run_steps(connection, query, params)
        return fetch_all(connection, query, params)


# The statements of several steps, joined by leases.STEP.
_STEPPED = frozenset({"renew_many"})


def _run_steps(connection: BaseDatabaseWrapper, query: str, params: dict[str, Any]) -> list[Row]:
    """The steps of ``query`` in one transaction, and every row they return."""
    rows: list[Row] = []
    with transaction.atomic(using=connection.alias):
        for step in query.split(leases.STEP):
            rows.extend(fetch_all(connection, step, params))
    return rows


DRIVER = SQLiteDriver()
