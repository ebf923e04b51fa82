"""How the admin and the ``bgtasks`` command put a :class:`TaskState` into words.

``static/django_bgtasks/live.js`` repeats these rules in the browser (its
``formatSeconds``, ``progressLabel`` and ``durationOf``), so that a cell the
script updates reads exactly like the one the server rendered. Change both
together.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from django.utils import timezone

from .leases import TaskState

# The CSS class suffix of each status badge.
STATUS_SLUGS = {
    "running": "running",
    "cancel requested": "cancel-requested",
    "stale": "stale",
    "idle": "idle",
}


def seconds(value: float | None) -> str:
    """``4.2 s``, ``42 s``, ``3 min 5 s`` or ``2 h 5 min``; ``""`` for ``None``."""
    if value is None:
        return ""
    value = max(value, 0.0)
    if value < 10:
        return f"{value:.1f} s"
    if value < 60:
        return f"{math.floor(value)} s"
    minutes, secs = divmod(math.floor(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def status_text(state: TaskState) -> str:
    """The badge: the status, and for a stale lease how long its holder has been silent."""
    if state.status == "stale":
        return f"stale: holder silent for {seconds(state.heartbeat_age)}"
    return state.status


def progress_label(state: TaskState) -> str:
    """``45%`` or ``45% (9/20)``; ``""`` when the value reports no progress.

    Rounded down, so that 100% means done."""
    progress = state.progress
    if progress is None:
        return ""
    label = f"{math.floor(progress * 100)}%"
    value: Any = state.value
    if isinstance(value, dict) and "done" in value and "total" in value:
        label += f" ({_number(value['done'])}/{_number(value['total'])})"
    return label


def _number(value: Any) -> str:
    # As JavaScript's String() writes it: 3.0 is "3".
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def duration(state: TaskState) -> float | None:
    """Seconds from the claim to the release, or to now (by the database's
    clock) while the lease is held or stale."""
    if state.started_at is None:
        return None
    if state.finished_at is not None:
        return (state.finished_at - state.started_at).total_seconds()
    if state.updated_at is None or state.heartbeat_age is None:
        return None
    return (state.updated_at - state.started_at).total_seconds() + state.heartbeat_age


def held(state: TaskState) -> bool:
    """Someone holds the lease, live or silent: what force release would end."""
    return state.running or state.stale


def when(value: dt.datetime | None) -> str:
    """A time in the current time zone, to the second."""
    if value is None:
        return ""
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")
