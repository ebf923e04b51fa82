"""The engines django-bgtasks runs on, and the one place their statements are
rendered and run: :func:`driver` (a connection's engine driver:
:mod:`~django_bgtasks.db.driver`), :func:`statements` (the lease operations
and the workers'), :func:`queue_statements` (the Django Tasks queue),
:func:`read`, :func:`write` (the one refusal inside ``atomic()``),
:func:`write_together` (several writes, one commit), each of an
operation's typed parameters (:mod:`~django_bgtasks.db.params`), which
:func:`encode` encodes as the engine takes them; and :func:`run` (each hands
back rows by column name: :mod:`~django_bgtasks.db.rows`). Each engine's statements, and how
it runs them, are in its own package (:mod:`~django_bgtasks.db.postgresql`,
:mod:`~django_bgtasks.db.sqlite`, :mod:`~django_bgtasks.db.mysql`); the
rules they keep, and what they share, in :mod:`~django_bgtasks.db.shared`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, TypeVar

from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.driver import Driver
from django_bgtasks.db.mysql.driver import DRIVER as MYSQL
from django_bgtasks.db.params import Params
from django_bgtasks.db.postgresql.driver import DRIVER as POSTGRESQL
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import (
    FLOW_KINDS,
    STATUSES,
    QueueStatements,
    Statements,
    has_queue_pick,
    with_queues,
)
from django_bgtasks.db.sqlite.driver import DRIVER as SQLITE
from django_bgtasks.exceptions import InAtomicBlock

_DRIVERS: dict[str, Driver] = {driver.vendor: driver for driver in (POSTGRESQL, SQLITE, MYSQL)}
SUPPORTED_VENDORS = tuple(_DRIVERS)
# The vendors the Django Tasks queue runs on (bgtasks.E015 refuses the others).
QUEUE_VENDORS = tuple(name for name, driver in _DRIVERS.items() if driver.queue is not None)

# Every rendered set, keyed by what it is, the vendor and the tables alone:
# quoting is fixed per vendor, and a key per connection object would grow
# with every thread.
_RENDERED: dict[tuple[str, ...], Any] = {}
_Set = TypeVar("_Set", Statements, QueueStatements)


def vendor_list() -> str:
    """The supported vendors, for messages: "postgresql, sqlite and mysql"."""
    return f"{', '.join(SUPPORTED_VENDORS[:-1])} and {SUPPORTED_VENDORS[-1]}"


def statements(
    connection: BaseDatabaseWrapper, *, task: str, run: str, worker: str, queued: str
) -> Statements:
    """The statements for this connection's vendor, on the lease table ``task``,
    the history table ``run``, the workers' table ``worker`` and the queued
    tasks' table ``queued`` (a worker's renewal renews both kinds of lease:
    ``renew_many``) (unquoted ``db_table`` names), ready to execute."""
    key = ("lease", connection.vendor, task, run, worker, queued)
    if key in _RENDERED:
        return _RENDERED[key]  # type: ignore[no-any-return]
    engine = driver(connection)
    tables = _quoted(connection, task=task, run=run, worker=worker, queued=queued)
    keep_tables = {name: f"{{{name}}}" for name in tables}
    # Fragments first (they may name the tables), then the tables.
    return _render(
        key,
        engine.statements,
        lambda template: template.format(**engine.fragments, **keep_tables).format(**tables),
    )


def _quoted(connection: BaseDatabaseWrapper, **tables: str) -> dict[str, str]:
    """Each of ``tables`` (a statement's name for it: its ``db_table``), quoted."""
    return {name: connection.ops.quote_name(table) for name, table in tables.items()}


def queue_statements(
    connection: BaseDatabaseWrapper,
    *,
    table: str,
    paused: str,
    slots: str = "django_bgtasks_flowslot",
    shares: str = "django_bgtasks_fairshare",
) -> QueueStatements:
    """The queue's statements for this connection's vendor, on ``table``, the
    paused queues' table ``paused``, the flow limits' ``slots`` and the fair
    shares' ``shares`` (unquoted ``db_table`` names), ready to execute."""
    engine = _DRIVERS.get(connection.vendor)
    if engine is None or engine.queue is None:
        raise NotSupportedError(
            f"django_bgtasks.backend.LeaseBackend supports {', '.join(QUEUE_VENDORS)}, "
            f"not {connection.vendor!r} (database {connection.alias!r})"
        )
    # A server's own set where it has one (MariaDB's, on MySQL's driver).
    name, templates = engine.queue_statements(connection)
    key = ("queue", name, table, paused, slots, shares)
    if key in _RENDERED:
        return _RENDERED[key]  # type: ignore[no-any-return]
    tables = _quoted(connection, table=table, paused=paused, slots=slots, shares=shares)
    return _render(
        key,
        templates,
        lambda template: template.format(**tables, **STATUSES, **FLOW_KINDS),
    )


def _render(key: tuple[str, ...], templates: _Set, fill: Callable[[str], str]) -> _Set:
    """Every statement of ``templates`` filled in, kept under ``key``."""
    rendered = type(templates)(
        **{field.name: fill(getattr(templates, field.name)) for field in fields(templates)}
    )
    _RENDERED[key] = rendered
    return rendered


def read(
    connection: BaseDatabaseWrapper,
    statements_of: Callable[[BaseDatabaseWrapper], Statements | QueueStatements],
    params: Params,
) -> list[Row]:
    """Run the statement of ``params`` (a field of the set
    ``statements_of(connection)``, a manager's rendered statements) on
    ``connection``, with ``params`` as the engine encodes them, and return its
    rows, each a dict by column name (:mod:`~django_bgtasks.db.rows`)."""
    rendered = statements_of(connection)
    statement = params.STATEMENT
    query: str = getattr(rendered, statement)
    values = encode(connection, params)
    return run(connection, statement, query, values, queue=isinstance(rendered, QueueStatements))


def write(
    connection: BaseDatabaseWrapper,
    operation: str,
    statements_of: Callable[[BaseDatabaseWrapper], Statements | QueueStatements],
    params: Params,
) -> list[Row]:
    """As :func:`read`, for a write, which must be durable when it returns:
    refused inside ``transaction.atomic()`` (:class:`InAtomicBlock`, naming
    ``operation``), before anything is rendered or sent."""
    if connection.in_atomic_block:
        raise InAtomicBlock(operation)
    return read(connection, statements_of, params)


def write_together(
    connection: BaseDatabaseWrapper,
    operation: str,
    statements_of: Callable[[BaseDatabaseWrapper], QueueStatements],
    statements: Sequence[str],
    params: Params,
) -> list[list[Row]]:
    """As :func:`write` for several of the queue's writes (``statements``),
    one after the other in one transaction, with one commit (on MySQL, sent
    as one query where the connection allows:
    :func:`~django_bgtasks.db.mysql.queue.in_one_transaction`): the rows of
    each, in order. ``params`` holds every one's. An error in any of them
    writes none."""
    if connection.in_atomic_block:
        raise InAtomicBlock(operation)
    rendered = statements_of(connection)
    values = encode(connection, params)
    queries = [_for_queues(getattr(rendered, statement), values) for statement in statements]
    return driver(connection).run_together(connection, statements, queries, values)


def encode(connection: BaseDatabaseWrapper, params: Params) -> dict[str, Any]:
    """The values of ``params`` as ``connection``'s engine takes them: its
    times and lists by the engine's driver, the rest as they are."""
    values = params.values()
    if params.TIMES or params.LISTS:
        engine = driver(connection)
        for name in params.TIMES:
            if values[name] is not None:
                values[name] = engine.time_param(values[name])
        for name in params.LISTS:
            values[name] = engine.list_param(values[name])
    return values


def run(
    connection: BaseDatabaseWrapper,
    statement: str,
    query: str,
    params: dict[str, Any],
    *,
    queue: bool = False,
) -> list[Row]:
    """Execute the rendered ``query`` of field ``statement`` (of the queue's
    statements with ``queue``) and return its rows by column name, as
    RETURNING gives them on PostgreSQL and SQLite, however the engine runs
    it (its driver's :meth:`~django_bgtasks.db.driver.Driver.run`)."""
    query = _for_queues(query, params)
    return driver(connection).run(connection, statement, query, params, queue=queue)


def _for_queues(query: str, params: dict[str, Any]) -> str:
    """``query`` with its pick of the claim's queues (shared.with_queues), where
    it has one: MySQL's and SQLite's claim and idle poll, whose ``queues`` are
    JSON text."""
    if not has_queue_pick(query):
        return query
    count = None if params["all"] else len(json.loads(params["queues"]))
    return with_queues(query, count)


def driver_or_none(connection: BaseDatabaseWrapper) -> Driver | None:
    """The driver of ``connection``'s engine; None where the package runs on none."""
    return _DRIVERS.get(connection.vendor)


def driver(connection: BaseDatabaseWrapper) -> Driver:
    """The driver of ``connection``'s engine; NotSupportedError for another."""
    engine = _DRIVERS.get(connection.vendor)
    if engine is None:
        raise NotSupportedError(
            f"django-bgtasks supports {vendor_list()}, "
            f"not {connection.vendor!r} (database {connection.alias!r})"
        )
    return engine
