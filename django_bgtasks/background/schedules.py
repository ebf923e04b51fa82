"""When a scheduled task is due: ``schedule=timedelta(...)`` or a cron string.

A schedule only answers "which slot comes after this instant?", and the
instant is always the database's clock (the workers' poll returns it), never
this server's. The slot itself is claimed in one statement (see
``WorkQueue.claim_scheduled``), so every worker agrees on it.

* ``timedelta(minutes=5)``: every five minutes, on a grid anchored at the Unix
  epoch (so 00:00, 00:05, ... UTC), whichever worker first sees the slot due.
* ``"0 3 * * *"``: a five-field cron expression in a time zone (``timezone=``,
  an IANA name, else ``settings.TIME_ZONE``), parsed by cronsim (the ``cron``
  extra). Daylight saving is cronsim's, as Debian's cron does it: an
  expression whose minute and hour fields are both fixed (``"30 2 * * *"``)
  runs a slot that falls in a skipped hour at the first minute after the
  jump, and a slot in a repeated hour once, at its first occurrence; an
  expression with ``*`` in either field follows the wall clock (no slot in a
  skipped hour, each slot of a repeated hour twice). docs/workers.md has the
  table; tests/background/test_schedules.py walks both transitions.
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
    """A five-field cron expression, in the time zone ``zone`` (an IANA name;
    ``None``: ``settings.TIME_ZONE``, read at each slot)."""

    expression: str
    zone: str | None = None

    @property
    def text(self) -> str:
        """The expression as given, and its zone when one was given
        (``0 3 * * * in Europe/Paris``): a changed zone is a changed schedule."""
        return self.expression if self.zone is None else f"{self.expression} in {self.zone}"

    def next_after(self, now: dt.datetime) -> dt.datetime:
        """The next matching minute strictly after ``now``, in the zone.

        cronsim starts from the local time of ``now``; inside a repeated hour
        (its second pass, ``fold=1``) it may answer a slot of the first pass,
        which is before ``now``: those are passed over, so the answer is
        always after ``now`` and a slot never comes twice."""
        from cronsim import CronSim

        zone = zoneinfo.ZoneInfo(self.zone or settings.TIME_ZONE or "UTC")
        for slot in CronSim(self.expression, now.astimezone(zone)):
            if slot > now:
                return slot.astimezone(dt.UTC)
        raise AssertionError("unreachable: cronsim ends only after 50 years without a match")


def parse_schedule(schedule: object, timezone: object = None) -> Every | Cron | None:
    """A ``timedelta`` above zero, a five-field cron string, or ``None``;
    ``timezone`` (an IANA name) is a cron string's, and no timedelta's.

    Anything else is a ``TypeError`` or ``ValueError`` that says what is wrong.
    """
    if schedule is None:
        validate_zone(timezone)  # kept for a cron string BGTASKS_SCHEDULES sets
        return None
    if isinstance(schedule, dt.timedelta):
        if timezone is not None:
            raise ValueError(
                "timezone goes with a cron schedule, not a timedelta (which runs on a grid "
                f"of UTC instants): {schedule!r}"
            )
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
    cron = Cron(_check_cron(schedule), validate_zone(timezone))
    if len(cron.text) > MAX_SCHEDULE_LENGTH:
        raise ValueError(f"schedule {cron.text!r} is longer than {MAX_SCHEDULE_LENGTH} characters")
    return cron


def validate_zone(zone: object) -> str | None:
    """``None``, or an IANA time zone name that this Python knows."""
    if zone is None:
        return None
    if not isinstance(zone, str):
        raise TypeError(f"timezone must be an IANA time zone name, not {type(zone).__name__}")
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"timezone {zone!r} is not a time zone this Python knows (an IANA name such "
            'as "Europe/Paris"; on Windows, pip install tzdata)'
        ) from None
    return zone


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
