"""A Django Tasks queue's lag: how long its oldest due ready task has
waited. The metrics view reads it for each queue (``bgtasks_queue_lag_seconds``),
and the dashboard's rollup for the minute just passed (queue/rollup.py).
"""

from __future__ import annotations

import datetime as dt

from django.db.models import Q

from django_bgtasks.models import QueuedTask

# How many of a queue's priorities its lag looks at, from the highest.
MAX_PRIORITIES = 10


def queue_lag(queue: str, now: dt.datetime) -> float:
    """The seconds since ``queue``'s oldest due ready task became ready: its
    ``run_after`` if later than its enqueueing (the claim's rule for "due",
    ``run_after <= now``, with the database's ``now``). The oldest of each
    priority, a priority at a time from the highest (each the first entry of
    the ready rows' index at that priority, due or not, then the first due),
    up to ``MAX_PRIORITIES`` of them (0 for a queue with none due)."""
    ready = QueuedTask.objects.ready().filter(queue_name=queue)
    due = Q(run_after__isnull=True) | Q(run_after__lte=now)
    oldest: dt.datetime | None = None
    below: int | None = None
    for _ in range(MAX_PRIORITIES):
        higher = ready if below is None else ready.filter(priority__lt=below)
        below = higher.order_by("-priority", "seq").values_list("priority", flat=True).first()
        if below is None:
            break
        first = (
            ready.filter(due, priority=below)
            .order_by("-priority", "seq")
            .values_list("enqueued_at", "run_after")
            .first()
        )
        if first is not None:
            enqueued, run_after = first
            became = max(enqueued, run_after) if run_after is not None else enqueued
            oldest = became if oldest is None else min(oldest, became)
    return 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)
