"""How PostgreSQL runs the statements: one each, prepared where the cursor may
(:mod:`~django_bgtasks.db.cursor`), a claim's LIMIT written into its text so
that it is planned once per connection, and lists sent as arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.cursor import fetch_all
from django_bgtasks.db.driver import Driver
from django_bgtasks.db.postgresql import leases
from django_bgtasks.db.postgresql.queue import LIMIT_MARK, QUEUE, with_limit
from django_bgtasks.db.postgresql.schema import SCHEMA
from django_bgtasks.db.rows import Row


class PostgreSQLDriver(Driver):
    """PostgreSQL's driver."""

    vendor = "postgresql"
    statements = leases.STATEMENTS
    fragments = leases.FRAGMENTS
    queue = QUEUE
    schema = SCHEMA
    checks_sync_replication = True
    listens = True

    def list_param(self, values: Sequence[Any]) -> Any:
        """An array: psycopg adapts a list to one."""
        return list(values)

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
        if LIMIT_MARK in query:
            query = with_limit(query, params["limit"])
        return fetch_all(connection, query, params)


DRIVER = PostgreSQLDriver()
