"""What an engine's driver is: how one database engine renders, encodes and
runs django-bgtasks' statements. Each engine has its own package
(:mod:`~django_bgtasks.db.postgresql`, :mod:`~django_bgtasks.db.mysql`,
:mod:`~django_bgtasks.db.sqlite`), whose ``driver`` module fills this in;
:mod:`~django_bgtasks.db.engines` picks a connection's and runs the
operations through it. What every engine's statements share is
:mod:`~django_bgtasks.db.shared`. The schema SQL the migrations install on an
engine is its package's ``schema`` module, by migration (:class:`Steps`),
run by :mod:`~django_bgtasks.db.schema`.

The defaults here are what PostgreSQL and SQLite do alike: one statement,
its rows by column name as RETURNING gives them, several writes in one
``atomic()``. An engine overrides where it differs.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.cursor import fetch_all
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import QueueStatements, Statements


@dataclass(frozen=True)
class Steps:
    """The schema SQL one migration (or one step of it) runs on one engine
    (db/<engine>/schema.py): its statements forwards and backwards, each run
    in order; and, where it drops the ``varchar_pattern_ops`` indexes Django
    adds beside a ``CharField`` (PostgreSQL's), the query that finds them by
    what they are (their names are Django's hash), given a table."""

    forwards: Sequence[str] = ()
    backwards: Sequence[str] = ()
    pattern_indexes: str = ""


class Driver:
    """One engine's statements and how it runs them."""

    # Django's ``connection.vendor`` for this engine.
    vendor: str
    # The lease operations' and the workers' statements, and the fragments
    # they are rendered with (``engines.statements``).
    statements: Statements
    fragments: dict[str, str]
    # The queue's statements; None where the engine has no Django Tasks queue.
    queue: QueueStatements | None = None
    # The schema SQL the migrations install on this engine (its package's
    # ``schema`` module), by migration: what db/schema.py runs there (a
    # migration that runs nothing on it has no entry).
    schema: Mapping[str, Steps] = MappingProxyType({})
    # Whether ``finish_and_claim`` runs its two writes one after the other,
    # each its own transaction: where one transaction for both was measured
    # slower than two (SQLite: docs/benchmarks.md).
    ends_then_claim_apart: bool = False
    # Whether the change feed can LISTEN for the lease table's changes
    # (push/feed.py), rather than poll.
    listens: bool = False
    # Whether BGTASKS_REQUIRE_SYNC_REPLICATION can be checked on this engine
    # (bgtasks.E034 where it can't).
    checks_sync_replication: bool = False

    def client_too_old(self) -> bool:
        """Whether the client library this process runs is too old for the
        statements (bgtasks.E004): SQLite's, which Python links."""
        return False

    def queue_statements(self, connection: BaseDatabaseWrapper) -> tuple[str, QueueStatements]:
        """The queue's statement templates for ``connection``, and a name for
        them that tells apart a server's own set (MariaDB's, on MySQL's driver)."""
        assert self.queue is not None
        return self.vendor, self.queue

    def time_param(self, value: dt.datetime) -> Any:
        """An aware ``value`` as the statements take a time."""
        return value

    def list_param(self, values: Sequence[Any]) -> Any:
        """A list of values as the statements take one (``seqs``, ``held``,
        ``queues``): JSON text, read by the engine's JSON table function."""
        return json.dumps(list(values))

    # The signature alike in every engine's driver: they override this one.
    def run(
        self,
        connection: BaseDatabaseWrapper,
        statement: str,
        query: str,
        params: dict[str, Any],
        *,
        queue: bool,
    ) -> list[Row]:
        """Execute the rendered ``query`` of field ``statement`` (of the
        queue's statements with ``queue``) and return its rows by column name."""
        return fetch_all(connection, query, params)

    def run_together(
        self,
        connection: BaseDatabaseWrapper,
        statements: Sequence[str],
        queries: Sequence[str],
        params: dict[str, Any],
    ) -> list[list[Row]]:
        """The queue's writes ``queries`` (of fields ``statements``), one after
        the other in one transaction: the rows of each."""
        with transaction.atomic(using=connection.alias):
            return [
                self.run(connection, statement, query, params, queue=True)
                for statement, query in zip(statements, queries, strict=True)
            ]
