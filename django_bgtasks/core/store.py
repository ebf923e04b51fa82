"""Where every lease statement runs: on this app's tables, through
:mod:`django_bgtasks.db.engines`, on the ``BGTASKS_DATABASE`` alias.

``BackgroundTask.objects`` (:mod:`~django_bgtasks.core.leases`,
:mod:`~django_bgtasks.core.requests`), the workers' operations
(:mod:`~django_bgtasks.core.claims`) and the change feed
(:mod:`django_bgtasks.push.feed`) run theirs here, each one statement:
:func:`write` in autocommit (refused inside ``atomic()``), :func:`read`
anywhere. None of them calls back into the manager for it.
"""

from __future__ import annotations

import functools

from django.apps import apps
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.conf import conf
from django_bgtasks.db import engines, read_database
from django_bgtasks.db.params import Params
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import Statements


def connection(using: str | None = None) -> BaseDatabaseWrapper:
    """The connection of the alias ``using``, by default ``BGTASKS_DATABASE``."""
    return connections[conf.DATABASE if using is None else using]


def statements(connection: BaseDatabaseWrapper) -> Statements:
    """The lease statements for ``connection``'s engine, on this app's tables
    (rendered once: :func:`django_bgtasks.db.engines.statements` keeps them)."""
    return engines.statements(connection, **_tables())


@functools.cache
def _tables() -> dict[str, str]:
    """The tables of the lease statements, by their name in them."""
    # Looked up in the app registry, not imported: models -> core -> db
    # stays one-way.
    return {
        name: apps.get_model("django_bgtasks", model)._meta.db_table
        for name, model in (
            ("task", "BackgroundTask"),
            ("run", "TaskRun"),
            ("worker", "Worker"),
            ("queued", "QueuedTask"),
        )
    }


def write(operation: str, params: Params) -> list[Row]:
    """Run one write, of ``params``' statement, in autocommit; inside
    ``atomic()`` it is refused with
    :class:`~django_bgtasks.exceptions.InAtomicBlock` naming ``operation``."""
    return engines.write(connection(), operation, statements, params)


def write_in_transaction(params: Params) -> list[Row]:
    """Run one write, of ``params``' statement, inside the caller's
    ``atomic()`` block on ``BGTASKS_DATABASE`` (refused outside one), so that
    it commits or rolls back with the caller's other writes: a Django Task
    schedule's slot and the task it enqueues."""
    conn = connection()
    if not conn.in_atomic_block:
        raise RuntimeError(
            f"{params.STATEMENT} runs inside transaction.atomic(using={conn.alias!r})"
        )
    return engines.read(conn, statements, params)


def read(params: Params, *, using: str | None = None) -> list[Row]:
    """Run one read, of ``params``' statement (on the alias ``using``, by
    default ``BGTASKS_DATABASE``, or inside an operator's list the read
    database: :func:`django_bgtasks.db.read_database.reading`)."""
    return engines.read(connection(using or read_database.alias()), statements, params)
