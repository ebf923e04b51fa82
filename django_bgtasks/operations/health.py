"""Whether this site can work its tasks, for orchestrators: ``bgtasks health``
and the ``bgtasks:ready`` view ask :func:`problem`, in this order:

1. the lease database (``BGTASKS_DATABASE``) is one of ``DATABASES`` and
   answers a statement;
2. every migration of django_bgtasks is applied on it (Django's migration
   loader, comparing the app's migrations with the recorded ones);
3. with ``workers=N``, at least ``N`` workers beat within their ttl, as the
   workers' list judges them (by the database's clock).

The first that fails is the answer: a :class:`Problem`, whose ``reason`` is
one line fit for anyone (no host names, no error text) and whose ``detail``
is for the operator.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DatabaseError, connections
from django.db.migrations.loader import MigrationLoader

from django_bgtasks.conf import conf
from django_bgtasks.db.outages import summary
from django_bgtasks.models import BackgroundTask

APP = "django_bgtasks"


@dataclass(frozen=True)
class Problem:
    """Why the site is not healthy: ``reason`` (one line, no secrets) and
    ``detail`` (what the operator needs to fix it; may be empty)."""

    reason: str
    detail: str = ""
    # The database did not answer: what a worker waits out (it retries),
    # where every other command stops.
    unreachable: bool = False

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


def required_workers(value: object) -> int:
    """``--workers`` / ``?workers=``: a whole number, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"workers must be a whole number, not {value!r}.")
    if value < 0:
        raise ValueError(f"workers must be 0 or more, not {value}.")
    return value


def problem(*, workers: int = 0) -> Problem | None:
    """The first check that fails (see the module's docstring), or ``None``."""
    workers = required_workers(workers)
    alias = conf.DATABASE
    if alias not in connections.settings:
        return Problem(
            f"BGTASKS_DATABASE {alias!r} is not one of DATABASES",
            f"set it to one of {', '.join(map(repr, connections.settings))}",
        )
    try:
        BackgroundTask.objects.work.clock()  # one statement, no table
        missing = unapplied_migrations(alias)
    except DatabaseError as exc:
        return unreachable(alias, exc)
    if missing:
        return Problem(
            f"{len(missing)} migration(s) of {APP} not applied on database {alias!r}",
            f"{', '.join(missing)}: run manage.py migrate --database {alias}",
        )
    if workers:
        try:
            listed = BackgroundTask.objects.work.workers()
        except DatabaseError as exc:
            return unreachable(alias, exc)
        live = sum(not worker.silent for worker in listed)
        if live < workers:
            return Problem(
                f"{live} live worker(s), fewer than the {workers} required",
                f"{len(listed) - live} silent (no heartbeat within their ttl)",
            )
    return None


def unapplied_migrations(alias: str) -> list[str]:
    """The names of the app's migrations not recorded as applied on ``alias``
    (all of them when Django's migrations table is missing)."""
    loader = MigrationLoader(connections[alias], ignore_no_migrations=True)
    return sorted(
        name
        for app, name in loader.graph.nodes
        if app == APP and (app, name) not in loader.applied_migrations
    )


def unreachable(alias: str, exc: BaseException) -> Problem:
    """Database ``alias`` did not answer (``exc``): where it was looked for
    (host and port, or file), and the first line of the driver's error."""
    return Problem(
        f"database {alias!r} unreachable",
        f"{where(alias)}: {summary(exc)}; is the server running there?",
        unreachable=True,
    )


def where(alias: str) -> str:
    """Where database ``alias`` is: its file (SQLite), else its host and port."""
    db = connections.settings[alias]
    if db["ENGINE"].endswith("sqlite3"):
        return f"file {db['NAME']}"
    host = db.get("HOST") or "localhost"
    return f"{host}:{db['PORT']}" if db.get("PORT") else str(host)
