"""Riding out a database outage: which errors mean "can't be reached right
now", dropping the broken connection (and only it, between a worker's polls),
and retrying a holder's fenced write until its lease's deadline.

A restart of the database, a failover or ``pg_terminate_backend`` breaks the
connection a holder is about to write on. The write is fenced (it matches the
holder's owner and token, and a live lease, by the database's clock), so
sending it again is safe: it either lands while the lease is still the
holder's, or matches nothing. Giving up at the first error instead would
leave the row ``RUNNING`` until its ttl, with its worker alive, and the run
would then be recovered as lost and run again. Both lease holders use this
(:class:`~django_bgtasks.core.runner.RunningLease` for background tasks,
:class:`~django_bgtasks.queue.execute.QueuedLease` for Django Tasks).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
)

from django_bgtasks.conf import conf

# Errors that mean "the database can't be reached right now": retried until
# the renew deadline. Anything else is a bug and ends the lease at once.
TRANSIENT_ERRORS = (OperationalError, InterfaceError)

_T = TypeVar("_T")


def summary(exc: BaseException) -> str:
    """A driver's error in one line, for a log line or a command's answer:
    its first (psycopg's and MySQL's run on, with hints, over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Stopped(Exception):
    """Told to stop while waiting to retry (a heartbeat thread that is ending)."""


def close_connection() -> None:
    """Close this thread's connection to the lease database. After an outage
    it is broken; closing it makes the next statement reconnect. Each thread
    has its own, so this closes only the caller's."""
    with contextlib.suppress(DatabaseError):
        connections[conf.DATABASE].close()


def close_broken_connections() -> None:
    """Between a worker's polls, and after each task it runs (as Django does
    after each request): Django's ``close_old_connections()``, except
    that a connection under ``CONN_MAX_AGE = 0`` (Django's default) is kept.
    That setting means one connection a request, and a poll is no request:
    closed each poll, the worker opened a connection a poll, 1.5 a second at
    the default ``--poll 1`` (on PostgreSQL, a backend process forked each
    time). A connection an error broke, or left in a transaction, is still
    closed, and a positive ``CONN_MAX_AGE`` still ends it when it is that old.
    Only the calling thread's connections: each thread has its own."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and connection.settings_dict["CONN_MAX_AGE"] == 0:
            connection.close_at = None  # as CONN_MAX_AGE = None: never too old
    close_old_connections()


def retry_delay(interval: float, remaining: float) -> float:
    """The wait before trying again: a quarter of the heartbeat ``interval``,
    between 50 ms and 1 s, and never past the deadline (``remaining`` seconds)."""
    return min(max(0.05, min(interval / 4, 1.0)), max(remaining, 0.0))


def retry_until_deadline(
    call: Callable[[], _T],
    *,
    name: str,
    interval: float,
    remaining: Callable[[], float],
    raise_if_lost: Callable[[], None],
    logger: logging.Logger,
    stop: threading.Event | None = None,
    extra: dict[str, object] | None = None,
) -> _T:
    """``call()``, retried on a new connection while the database can't be
    reached. ``raise_if_lost()`` ends it (with ``LeaseLost``) once the lease's
    deadline has passed: ``remaining()`` is the time left, on this process's
    monotonic clock. The wait between tries is :func:`retry_delay`. A set ``stop`` raises
    :class:`Stopped` instead of waiting. ``extra`` goes with each warning
    logged (the lease's ``log_extra()``)."""
    while True:
        raise_if_lost()
        try:
            return call()
        except TRANSIENT_ERRORS as exc:
            logger.warning(
                "%s: database unreachable, retrying: %s", name, summary(exc), extra=extra
            )
            close_connection()
        delay = retry_delay(interval, remaining())
        if stop is None:
            stop = threading.Event()  # (never set: a plain sleep)
        if stop.wait(delay):
            raise Stopped
