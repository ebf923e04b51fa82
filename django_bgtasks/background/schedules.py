"""When a scheduled task is due: ``schedule=timedelta(...)`` or a cron string.

A schedule only answers "which slot comes after this instant?", and the
instant is always the database's clock (the workers' poll returns it), never
this server's. The slot itself is claimed in one statement (see
``WorkQueue.claim_scheduled``), so every worker agrees on it.

* ``timedelta(minutes=5)``: every five minutes, on a grid anchored at the Unix
  epoch (so 00:00, 00:05, ... UTC), whichever worker first sees the slot due.
* ``"0 3 * * *"``: a five-field cron expression in ``settings.TIME_ZONE``,
  parsed by cronsim (the ``cron`` extra), which also handles daylight saving.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings

from django_bgtasks.limits import MAX_SCHEDULE_LENGTH

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class Schedule(Protocol):
    """A parsed schedule."""

    @property
    def text(self) -> str:
        """How the schedule is stored and shown: ``every 60s`` or the cron string."""

    def next_after(self, now: dt.datetime) -> dt.datetime:
        """The first slot strictly after ``now`` (aware), as an aware UTC time."""


@dataclass(frozen=True)
class Every:
    """Every ``interval``, on a grid anchored at the Unix epoch."""

    interval: dt.timedelta

    @property
    def text(self) -> str:
        """``every 60s``."""
        return f"every {self.interval.total_seconds():g}s"

    def next_after(self, now: dt.datetime) -> dt.datetime:
        """The next grid point after ``now``, in whole microseconds (no float drift)."""
        step = _microseconds(self.interval)
        elapsed = _microseconds(now - _EPOCH)
        return _EPOCH + dt.timedelta(microseconds=(elapsed // step + 1) * step)


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression, in ``settings.TIME_ZONE``."""

    expression: str

    @property
    def text(self) -> str:
        """The expression as given."""
        return self.expression

    def next_after(self, now: dt.datetime) -> dt.datetime:
        """The next matching minute after ``now``, in the site's time zone."""
        from cronsim import CronSim

        local = now.astimezone(zoneinfo.ZoneInfo(settings.TIME_ZONE or "UTC"))
        return next(CronSim(self.expression, local)).astimezone(dt.UTC)


def parse_schedule(schedule: object) -> Every | Cron | None:
    """A ``timedelta`` above zero, a five-field cron string, or ``None``.

    Anything else is a ``TypeError`` or ``ValueError`` that says what is wrong.
    """
    if schedule is None:
        return None
    if isinstance(schedule, dt.timedelta):
        if schedule <= dt.timedelta(0):
            raise ValueError(f"schedule must be a timedelta above zero, not {schedule!r}")
        if _microseconds(schedule) < 1000:
            raise ValueError(f"schedule must be at least a millisecond, not {schedule!r}")
        return Every(schedule)
    if not isinstance(schedule, str):
        raise TypeError(
            f"schedule must be a datetime.timedelta or a cron string, not "
            f"{type(schedule).__name__}"
        )
    return Cron(_check_cron(schedule))


def _check_cron(expression: str) -> str:
    fields = expression.split()
    if len(fields) != 5 or len(expression) > MAX_SCHEDULE_LENGTH:
        raise ValueError(
            f"schedule {expression!r} is not a five-field cron expression "
            "(minute hour day-of-month month day-of-week)"
        )
    try:
        from cronsim import CronSim, CronSimError
    except ImportError:
        raise ValueError(
            "cron schedules need cronsim: pip install 'django-bgtasks[cron]'"
        ) from None
    try:
        CronSim(expression, dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    except CronSimError as exc:
        raise ValueError(
            f"schedule {expression!r} is not a valid cron expression: {exc}"
        ) from None
    return " ".join(fields)


def _microseconds(delta: dt.timedelta) -> int:
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
