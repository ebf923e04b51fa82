"""A Django Tasks queue's lag (queue/lag.py, ``queue_lag``) on every engine:
the seconds since its oldest due ready task became ready (its enqueueing, or
its ``run_after`` when later), across its priorities, the highest
``MAX_PRIORITIES`` of them; 0 for a queue with none due. (As the metrics
read it, by the database's clock: tests/operations/test_cluster.py; on a
rollup's minute: tests/queue/test_rollup.py.)"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.lag import MAX_PRIORITIES, queue_lag
from tests import djtasks


@pytest.fixture
def now() -> dt.datetime:
    """The time each test reads the lag at: its own start, so that a task
    due in a minute is not yet due when the claim (by the database's clock)
    runs, however late in the suite the test does."""
    return timezone.now().replace(microsecond=0)


def _ready(
    alias: str,
    now: dt.datetime,
    enqueued: float,
    *,
    run_after: float | None = None,
    priority: int = 0,
    queue: str = "default",
) -> str:
    """A ready task of ``queue``, enqueued ``enqueued`` seconds before ``now``
    (and due ``run_after`` seconds before it: negative, not due yet)."""
    task = djtasks.add.using(queue_name=queue, priority=priority)
    result = task.enqueue(1, 2)
    QueuedTask.objects.using(alias).filter(uuid=result.id).update(
        enqueued_at=now - dt.timedelta(seconds=enqueued),
        run_after=None if run_after is None else now - dt.timedelta(seconds=run_after),
    )
    return result.id


def test_a_queue_with_nothing_due_has_no_lag(tasks_alias: str, now: dt.datetime) -> None:
    assert queue_lag("default", now) == 0.0
    _ready(tasks_alias, now, 600, run_after=-60)  # due in a minute
    _ready(tasks_alias, now, 600, queue="other")  # another queue's
    assert queue_lag("default", now) == 0.0
    # A task claimed is no longer waiting.
    _ready(tasks_alias, now, 300)
    assert queue_lag("default", now) == 300.0
    assert QueuedTask.objects.claim("w", queues=["default"]) is not None
    assert queue_lag("default", now) == 0.0


def test_the_lag_is_since_the_oldest_due_task_became_ready(
    tasks_alias: str, now: dt.datetime
) -> None:
    _ready(tasks_alias, now, 900, run_after=120)  # due for two minutes: ready since then
    assert queue_lag("default", now) == 120.0
    _ready(tasks_alias, now, 300, run_after=600, queue="other")  # due before its enqueueing
    assert queue_lag("other", now) == 300.0  # since that
    # Never negative, by a clock that reads earlier than the enqueueing.
    assert queue_lag("default", now - dt.timedelta(hours=1)) == 0.0


def test_the_oldest_of_every_priority_counts_not_only_the_highests(
    tasks_alias: str, now: dt.datetime
) -> None:
    _ready(tasks_alias, now, 60, priority=10)
    _ready(tasks_alias, now, 500, run_after=-60, priority=5)  # its priority's first: not due
    _ready(tasks_alias, now, 400, priority=5)  # ... and the first due of that priority
    assert queue_lag("default", now) == 400.0
    _ready(tasks_alias, now, 700, priority=-3)
    assert queue_lag("default", now) == 700.0


def test_the_lag_looks_at_the_highest_priorities_only(tasks_alias: str, now: dt.datetime) -> None:
    for priority in range(MAX_PRIORITIES - 1):
        _ready(tasks_alias, now, 10, priority=100 - priority)
    _ready(tasks_alias, now, 1000, priority=0)  # the last priority it looks at
    assert queue_lag("default", now) == 1000.0
    _ready(tasks_alias, now, 20, priority=1)  # one more above it: now past the bound
    assert queue_lag("default", now) == 20.0
