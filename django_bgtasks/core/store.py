"""Where every lease statement runs: on this app's tables, through
:mod:`django_bgtasks.db.vendors`, on the ``BGTASKS_DATABASE`` alias.

``BackgroundTask.objects`` (:mod:`~django_bgtasks.core.leases`,
:mod:`~django_bgtasks.core.requests`), the workers' operations
(:mod:`~django_bgtasks.core.claims`) and the change feed
(:mod:`django_bgtasks.push.feed`) run theirs here, each one statement:
:func:`write` in autocommit (refused inside ``atomic()``), :func:`read`
anywhere. None of them calls back into the manager for it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.apps import apps
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.conf import conf
from django_bgtasks.db import vendors
from django_bgtasks.db.rows import Row
from django_bgtasks.db.rules import Statements

# Kept per vendor: every operation needs them, the tables don't change.
_rendered: dict[str, Statements] = {}


def connection(using: str | None = None) -> BaseDatabaseWrapper:
    """The connection of the alias ``using``, by default ``BGTASKS_DATABASE``."""
    return connections[conf.DATABASE if using is None else using]


def statements(connection: BaseDatabaseWrapper) -> Statements:
    """The lease statements for ``connection``'s vendor, on this app's tables."""
    try:
        return _rendered[connection.vendor]
    except KeyError:
        pass
    # The tables are the models', looked up in the app registry, not
    # imported: models -> core -> db stays one-way.
    task, run, worker, queued = (
        apps.get_model("django_bgtasks", model)._meta.db_table
        for model in ("BackgroundTask", "TaskRun", "Worker", "QueuedTask")
    )
    rendered = vendors.statements(connection, task=task, run=run, worker=worker, queued=queued)
    _rendered[connection.vendor] = rendered
    return rendered


def write(operation: str, statement: str, params: dict[str, Any]) -> list[Row]:
    """Run one write ``statement`` in autocommit; inside ``atomic()`` it is
    refused with :class:`~django_bgtasks.exceptions.InAtomicBlock` naming
    ``operation``."""
    return vendors.write(connection(), operation, statements, statement, params)


def write_in_transaction(statement: str, params: dict[str, Any]) -> list[Row]:
    """Run one write ``statement`` inside the caller's ``atomic()`` block on
    ``BGTASKS_DATABASE`` (refused outside one), so that it commits or rolls
    back with the caller's other writes: a Django Task schedule's slot and
    the task it enqueues."""
    conn = connection()
    if not conn.in_atomic_block:
        raise RuntimeError(f"{statement} runs inside transaction.atomic(using={conn.alias!r})")
    return vendors.read(conn, statements, statement, params)


def read(statement: str, params: dict[str, Any], *, using: str | None = None) -> list[Row]:
    """Run one read ``statement`` (on the alias ``using``, by default
    ``BGTASKS_DATABASE``)."""
    return vendors.read(connection(using), statements, statement, params)


def time_param(value: dt.datetime) -> Any:
    """``value`` as the lease database's statements take a time."""
    return vendors.time_param(connection(), value)
