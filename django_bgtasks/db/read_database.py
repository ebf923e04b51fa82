"""Where the operator's list reads go (``BGTASKS_READ_DATABASE``), how old
what they read may be, and the fall back to the primary when the replica
can't be read.

A dashboard refreshed every few seconds on every web replica reads where the
claims commit. A site with a streaming replica of ``BGTASKS_DATABASE`` names
it in ``BGTASKS_READ_DATABASE``, and the surfaces that list (the admin's
lists and dashboard, the API's lists, the metrics view, ``bgtasks list``,
``queues`` and ``workers``) run their reads inside :func:`reading`: there
the managers' reads go to :func:`alias`. Everything else stays on the
primary: a task's own page (what an operator acts on), every action and
write, the worker processes, the health checks (which say whether *this*
deployment works), and the rollups that the dashboard's catch-up writes.

Only reads are routed: the managers' writes name ``BGTASKS_DATABASE``
themselves, so a write reached from inside :func:`reading` still goes to the
primary. The alias is a context variable, so a thread or a coroutine outside
a surface's request never sees it.

Each surface says what it read (:class:`ReadSource`): the alias, and how old
its data may be, measured on the replica when it is PostgreSQL
(:func:`~django_bgtasks.db.postgresql.probes.postgresql_standby`, one query
a request); on MySQL, MariaDB and SQLite the age is not measured, and said to
be unknown. A replica is not read when it can't be reached or fails that
query, or when it is PostgreSQL and may be further behind than
``BGTASKS_READ_MAX_LAG`` (or how far is not known): the surface then reads
the primary and says why. The limit matters beyond freshness: the
statements judge a heartbeat's age by the clock of the server they run on,
so on a replica ``lag`` seconds behind, a worker's or a lease's age reads up
to ``lag`` seconds older than on the primary, and one near its ttl may show
as silent or stale. The default limit (10 s) is well within the default
ttl's margin (a heartbeat every 40 s of a 120 s ttl).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections

from django_bgtasks.conf import conf
from django_bgtasks.db.postgresql.probes import postgresql_standby

logger = logging.getLogger("django_bgtasks.read_database")

# The alias of the reads inside reading(), None outside.
_READING: ContextVar[str | None] = ContextVar("bgtasks_read_alias", default=None)


def alias() -> str:
    """The alias the managers' reads go to: the read database inside
    :func:`reading`, else ``BGTASKS_DATABASE``."""
    return _READING.get() or conf.DATABASE


@dataclass(frozen=True, slots=True)
class ReadSource:
    """What a surface read: the ``alias``, whether it is a ``replica`` (the
    alias of ``BGTASKS_READ_DATABASE``, not ``BGTASKS_DATABASE``), how many
    seconds behind the primary it may be (``lag``: 0 for the primary, None
    when not known), and, where the replica was named but not read,
    ``fallback``: why."""

    alias: str
    replica: bool
    lag: float | None
    fallback: str | None = None

    def describe(self) -> str:
        """A sentence for the surface to show, or "" when it read the primary
        because no replica is named."""
        if self.fallback is not None:
            return f"Read from the primary: {self.fallback}"
        if not self.replica:
            return ""
        if self.lag is None:
            return f"Read from the replica {self.alias!r}; how far behind it is, is not known."
        return f"Read from the replica {self.alias!r}, up to {self.lag:.1f} s behind the primary."

    def as_json(self) -> dict[str, Any]:
        """The API's ``"read_from"``."""
        return {
            "database": self.alias,
            "replica": self.replica,
            "lag_seconds": self.lag,
            "fallback": self.fallback,
        }


def source() -> ReadSource:
    """Where the operator's reads should go now: the replica, if it is named
    and answers, with its lag; else the primary."""
    primary, replica = conf.DATABASE, conf.READ_DATABASE
    if replica == primary:
        return ReadSource(primary, replica=False, lag=0.0)
    connection = connections[replica]
    try:
        standby = postgresql_standby(connection)
        if standby is None:
            connection.ensure_connection()  # reachable; its age not measured
    except DatabaseError as exc:
        # Its connection is dropped, so that the next request connects
        # afresh instead of failing on a broken one.
        with contextlib.suppress(DatabaseError):
            connection.close()
        text = str(exc).strip()
        reason = text.splitlines()[0] if text else type(exc).__name__
        return _fallback(f"the replica {replica!r} can't be read ({reason}).")
    if standby is None:
        return ReadSource(replica, replica=True, lag=None)
    limit = conf.READ_MAX_LAG
    if limit is not None and standby.lag is None:
        return _fallback(f"how far the replica {replica!r} is behind is not known.")
    if limit is not None and standby.lag is not None and standby.lag > limit:
        return _fallback(
            f"the replica {replica!r} may be {standby.lag:.1f} s behind, more than "
            f"BGTASKS_READ_MAX_LAG ({limit:g} s)."
        )
    return ReadSource(replica, replica=True, lag=standby.lag)


def _fallback(reason: str) -> ReadSource:
    """The primary, read because the replica could not be, for ``reason``."""
    logger.warning("Reading BGTASKS_DATABASE, not BGTASKS_READ_DATABASE: %s", reason)
    return ReadSource(conf.DATABASE, replica=False, lag=0.0, fallback=reason)


@contextlib.contextmanager
def reading() -> Iterator[ReadSource]:
    """The managers' reads inside the block go to the read database (or,
    when it can't be read, to the primary); yields what they read."""
    found = source()
    token = _READING.set(found.alias)
    try:
        yield found
    finally:
        _READING.reset(token)
