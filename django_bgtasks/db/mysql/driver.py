"""How MySQL and MariaDB run the statements: each its own way, by its reader
(:data:`~django_bgtasks.db.mysql.leases.READERS`,
:data:`~django_bgtasks.db.mysql.queue.READERS`, MariaDB's
:data:`~django_bgtasks.db.mysql.mariadb.READERS`), into the rows RETURNING
gives on the other engines; several writes as one query where the
connection allows; times as the naive UTC datetimes Django stores."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.driver import Driver
from django_bgtasks.db.mysql import leases, mariadb
from django_bgtasks.db.mysql.queue import QUEUE, in_one_transaction
from django_bgtasks.db.mysql.queue import READERS as QUEUE_READERS
from django_bgtasks.db.mysql.schema import SCHEMA
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import QueueStatements


class MySQLDriver(Driver):
    """MySQL's and MariaDB's driver."""

    vendor = "mysql"
    statements = leases.STATEMENTS
    fragments = leases.FRAGMENTS
    queue = QUEUE
    schema = SCHEMA

    def queue_statements(self, connection: BaseDatabaseWrapper) -> tuple[str, QueueStatements]:
        """MariaDB's own where they differ from MySQL's (db/mysql/mariadb.py)."""
        if _is_mariadb(connection):
            return "mariadb", mariadb.QUEUE
        return self.vendor, QUEUE

    def time_param(self, value: dt.datetime) -> dt.datetime:
        """A naive UTC datetime (what Django stores)."""
        return value.astimezone(dt.UTC).replace(tzinfo=None)

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
        if not queue:
            readers = leases.READERS
        elif _is_mariadb(connection):
            readers = mariadb.READERS
        else:
            readers = QUEUE_READERS
        return readers[statement](connection, statement, query, params)

    def run_together(
        self,
        connection: BaseDatabaseWrapper,
        statements: Sequence[str],
        queries: Sequence[str],
        params: dict[str, Any],
    ) -> list[list[Row]]:
        """One query where the connection allows (db/mysql/queue.py)."""
        return in_one_transaction(connection, statements, queries, params)


def _is_mariadb(connection: BaseDatabaseWrapper) -> bool:
    return bool(connection.mysql_is_mariadb)  # type: ignore[attr-defined]


DRIVER = MySQLDriver()
