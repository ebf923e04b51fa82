"""The cluster's numbers, read from the database for each scrape of
``bgtasks:metrics`` (:mod:`django_bgtasks.http.metrics` puts them into
Prometheus' text format): what the admin and ``bgtasks list`` show, counted.

Every number comes from the lease database at the moment of the read, by the
database's clock, so any replica answers alike and nothing is kept between
scrapes. A read is a bounded number of statements whatever the size of the
history (``TaskRun`` is never read): the lease table (one row per task), the
workers' table (one row per worker), the database's clock, and three reads
of the queue's table through its indexes (``bgtasks_queued_ready``, led by
``status, queue_name``; ``bgtasks_queued_running``, led by ``status``).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

from django.db.models import Count, Min, Q
from django.db.models.functions import Coalesce, Greatest

from django_bgtasks.choices import QueueStatus, Status
from django_bgtasks.conf import conf, lease_backends
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations.writes import task_states

# The statuses bgtasks_queue_tasks counts: the work not done yet.
LIVE_QUEUE_STATUSES = (str(QueueStatus.READY), str(QueueStatus.RUNNING))
# Django's DEFAULT_TASK_QUEUE_NAME (not imported: a site of background tasks
# alone may have no Tasks framework).
DEFAULT_QUEUE = "default"
# bgtasks_workers' states, as the workers' list judges them (WorkerState.silent).
LIVE = "live"
SILENT = "silent"


@dataclass(frozen=True)
class ClusterCounts:
    """One read of the cluster.

    * ``tasks``: background tasks by ``TaskState.status`` (every status, 0
      included, the registered tasks that never ran too);
    * ``queue_tasks``: Django Tasks waiting or running, by ``(queue,
      status)`` (``READY``, ``RUNNING``), 0 included, for every queue a
      ``LeaseBackend`` of ``TASKS`` names and every queue with such a row.
      Not the finished ones (``SUCCESSFUL``, ``FAILED``): they are the
      queue's history, kept until ``bgtasks prune``, and counting them would
      read every one at each scrape (a failure rate is the workers' to count);
    * ``queue_lag``: by queue (the same queues), the seconds since the
      oldest ready task whose ``run_after`` has passed became ready (0 for a
      queue with none);
    * ``workers``: ``live`` and ``silent`` workers;
    * ``stale_leases``: leases whose holder went silent past its ttl and that
      nobody took over yet: background tasks' (status ``stale``) and running
      Django Tasks' (which a worker's poll recovers).
    """

    tasks: dict[str, int]
    queue_tasks: dict[tuple[str, str], int]
    queue_lag: dict[str, float]
    workers: dict[str, int]
    stale_leases: int


def cluster_counts() -> ClusterCounts:
    """Read the cluster's numbers (see :class:`ClusterCounts`)."""
    states = task_states()
    tasks = Counter(str(state.status) for state in states)
    workers = Counter(
        SILENT if worker.silent else LIVE for worker in BackgroundTask.objects.work.workers()
    )
    now = BackgroundTask.objects.work.clock()
    queue_tasks = _queue_counts()
    queues = sorted(_configured_queues() | {queue for queue, _status in queue_tasks})
    lag = dict.fromkeys(queues, 0.0) | _queue_lag(now)
    return ClusterCounts(
        tasks={str(status): tasks[str(status)] for status in Status},
        queue_tasks={
            (queue, status): queue_tasks.get((queue, status), 0)
            for queue in queues
            for status in LIVE_QUEUE_STATUSES
        },
        queue_lag=lag,
        workers={LIVE: workers[LIVE], SILENT: workers[SILENT]},
        stale_leases=sum(state.stale for state in states) + _stale_queued(now),
    )


def _configured_queues() -> set[str]:
    """The queues of every ``LeaseBackend`` in ``TASKS`` (Django's default
    queue for one that names none), so that their series are there at 0."""
    return {
        queue
        for params in lease_backends().values()
        for queue in params.get("QUEUES", [DEFAULT_QUEUE])
    }


def _queue_counts() -> dict[tuple[str, str], int]:
    """Waiting and running Django Tasks by queue and status: one GROUP BY
    over the rows of those statuses alone, from the index led by ``status,
    queue_name``."""
    rows = (
        QueuedTask.objects.using(conf.DATABASE)
        .filter(status__in=LIVE_QUEUE_STATUSES)
        .order_by()  # without the model's ordering, which would join the GROUP BY
        .values_list("queue_name", "status")
        .annotate(count=Count("*"))
    )
    return {(queue, status): count for queue, status, count in rows}


def _queue_lag(now: dt.datetime) -> dict[str, float]:
    """By queue, the seconds since the oldest due ready task became ready:
    its ``run_after`` if later than its enqueueing (the claim's rule for
    "due", ``run_after <= now``, with the database's ``now``)."""
    became_ready = Greatest("enqueued_at", Coalesce("run_after", "enqueued_at"))
    rows = (
        QueuedTask.objects.ready()
        .order_by()
        .filter(Q(run_after__isnull=True) | Q(run_after__lte=now))
        .values_list("queue_name")
        .annotate(oldest=Min(became_ready))
    )
    return {
        queue: max((now - oldest).total_seconds(), 0.0)
        for queue, oldest in rows
        if oldest is not None
    }


def _stale_queued(now: dt.datetime) -> int:
    """Running Django Tasks whose heartbeat is older than their ttl: what
    the queue's ``recover`` statement takes back (``updated_at < now - ttl``),
    counted here without writing. The running rows are at most the workers'
    slots, and the silent ones a poll has not recovered yet."""
    rows = QueuedTask.objects.running().order_by().values_list("updated_at", "ttl")
    return sum(
        1
        for updated_at, ttl in rows
        if updated_at is not None and (now - updated_at).total_seconds() > ttl
    )
