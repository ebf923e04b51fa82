"""What the lease operations hand back: ``Lease``, ``Renewal`` and ``TaskState``.

Frozen values, with the rules derived from a row (status, progress, held,
duration) as their properties, so that the admin, the API and the command read
them alike. Nothing here touches the database, so every layer may import it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .choices import Status
from .validation import is_finite_number


@dataclass(frozen=True, slots=True)
class Lease:
    """A successful claim. ``token`` is the fencing token: pass it to every
    write, and to any other system that can check it."""

    name: str
    owner: str
    token: int
    ttl: float


@dataclass(frozen=True, slots=True)
class Renewal:
    """What a holder learns from a successful heartbeat or update."""

    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class TaskState:
    """One task's row as every replica sees it.

    ``running`` is already ``False`` when the holder's heartbeat is older than
    its ttl; ``stale`` is then ``True`` and says why. ``heartbeat_age`` is the
    seconds since the last heartbeat, by the database's clock.
    """

    name: str
    value: Any
    running: bool
    owner: str
    token: int
    ttl: float
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    updated_at: dt.datetime | None
    cancel_requested: bool
    outcome: str
    error: str
    stale: bool
    heartbeat_age: float | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> TaskState:
        """Build from a row in ``sql.STATE_COLUMNS`` order, as either vendor returns it."""
        (name, value, running, owner, token, ttl, started_at, finished_at, updated_at,
         cancel_requested, outcome, error, stale, heartbeat_age) = row  # fmt: skip
        return cls(
            name=name,
            value=json.loads(value) if isinstance(value, str) else value,
            running=bool(running),
            owner=owner,
            token=int(token),
            ttl=float(ttl),
            started_at=as_datetime(started_at),
            finished_at=as_datetime(finished_at),
            updated_at=as_datetime(updated_at),
            cancel_requested=bool(cancel_requested),
            outcome=outcome,
            error=error,
            stale=bool(stale),
            heartbeat_age=None if heartbeat_age is None else float(heartbeat_age),
        )

    @property
    def status(self) -> Status:
        """``running``, ``cancel requested``, ``stale`` or ``idle``."""
        if self.running:
            return Status.CANCEL_REQUESTED if self.cancel_requested else Status.RUNNING
        return Status.STALE if self.stale else Status.IDLE

    @property
    def held(self) -> bool:
        """Someone holds the lease, live or silent: what force release would end."""
        return self.running or self.stale

    @property
    def progress(self) -> float | None:
        """0-1 from ``value["done"]/value["total"]`` or ``value["progress"]``."""
        value = self.value
        if not isinstance(value, dict):
            return None
        done, total = value.get("done"), value.get("total")
        if is_finite_number(done) and is_finite_number(total) and total > 0:
            return float(min(max(done / total, 0.0), 1.0))
        progress = value.get("progress")
        if is_finite_number(progress):
            return float(min(max(progress, 0.0), 1.0))
        return None

    @property
    def duration(self) -> float | None:
        """Seconds from the claim to the release, or to now (by the database's
        clock) while the lease is held or stale."""
        if self.started_at is None:
            return None
        if self.finished_at is not None:
            return (self.finished_at - self.started_at).total_seconds()
        if self.updated_at is None or self.heartbeat_age is None:
            return None
        return (self.updated_at - self.started_at).total_seconds() + self.heartbeat_age

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict: times in ISO 8601, plus ``status`` and ``progress``."""
        data = asdict(self)
        for key in ("started_at", "finished_at", "updated_at"):
            if data[key] is not None:
                data[key] = data[key].isoformat()
        data["status"] = str(self.status)
        data["progress"] = self.progress
        return data


def run_duration(started_at: dt.datetime | None, finished_at: dt.datetime | None) -> float | None:
    """Seconds a finished run took, or ``None`` if either end is unknown."""
    if started_at is None or finished_at is None:
        return None
    return (finished_at - started_at).total_seconds()


def as_datetime(value: object) -> dt.datetime | None:
    """An aware datetime from what either vendor returns for a time column."""
    # PostgreSQL hands back aware datetimes; SQLite hands back the naive UTC
    # times that the statements wrote (as datetimes or as text, depending on
    # the column's declared type).
    if value is None:
        return None
    parsed = value if isinstance(value, dt.datetime) else parse_datetime(str(value))
    if parsed is not None and timezone.is_naive(parsed):
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed
