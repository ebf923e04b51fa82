"""A Django Tasks queue's lag (queue/lag.py, ``queue_lag``) on every engine:
the seconds since its oldest due ready task became ready (its enqueueing, or
its ``run_after`` when later), across its priorities, the highest
``MAX_PRIORITIES`` of them; 0 for a queue with none due. (As the metrics
read it, by the database's clock: tests/operations/test_cluster.py; on a
rollup's minute: tests/queue/test_rollup.py.)"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.lag import MAX_PRIORITIES, queue_lag
from tests import djtasks

NOW = timezone.now().replace(microsecond=0)


def _ready(
    alias: str,
    enqueued: float,
    *,
    run_after: float | None = None,
    priority: int = 0,
    queue: str = "default",
) -> str:
    """A ready task of ``queue``, enqueued ``enqueued`` seconds before NOW
    (and due ``run_after`` seconds before it: negative, not due yet)."""
    task = djtasks.add.using(queue_name=queue, priority=priority)
    result = task.enqueue(1, 2)
    QueuedTask.objects.using(alias).filter(uuid=result.id).update(
        enqueued_at=NOW - dt.timedelta(seconds=enqueued),
        run_after=None if run_after is None else NOW - dt.timedelta(seconds=run_after),
    )
    return result.id


def test_a_queue_with_nothing_due_has_no_lag(tasks_alias: str) -> None:
    assert queue_lag("default", NOW) == 0.0
    _ready(tasks_alias, 600, run_after=-60)  # due in a minute
    _ready(tasks_alias, 600, queue="other")  # another queue's
    assert queue_lag("default", NOW) == 0.0
    # A task claimed is no longer waiting.
    _ready(tasks_alias, 300)
    assert queue_lag("default", NOW) == 300.0
    assert QueuedTask.objects.claim("w", queues=["default"]) is not None
    assert queue_lag("default", NOW) == 0.0


def test_the_lag_is_since_the_oldest_due_task_became_ready(tasks_alias: str) -> None:
    _ready(tasks_alias, 900, run_after=120)  # due for two minutes: ready since then
    assert queue_lag("default", NOW) == 120.0
    _ready(tasks_alias, 300, run_after=600, queue="other")  # due before its enqueueing
    assert queue_lag("other", NOW) == 300.0  # since that
    # Never negative, by a clock that reads earlier than the enqueueing.
    assert queue_lag("default", NOW - dt.timedelta(hours=1)) == 0.0


def test_the_oldest_of_every_priority_counts_not_only_the_highests(tasks_alias: str) -> None:
    _ready(tasks_alias, 60, priority=10)
    _ready(tasks_alias, 500, run_after=-60, priority=5)  # its priority's first: not due
    _ready(tasks_alias, 400, priority=5)  # ... and the first due of that priority
    assert queue_lag("default", NOW) == 400.0
    _ready(tasks_alias, 700, priority=-3)
    assert queue_lag("default", NOW) == 700.0


def test_the_lag_looks_at_the_highest_priorities_only(tasks_alias: str) -> None:
    for priority in range(MAX_PRIORITIES - 1):
        _ready(tasks_alias, 10, priority=100 - priority)
    _ready(tasks_alias, 1000, priority=0)  # the last priority it looks at
    assert queue_lag("default", NOW) == 1000.0
    _ready(tasks_alias, 20, priority=1)  # one more above it: now past the bound
    assert queue_lag("default", NOW) == 20.0
