"""The cluster's numbers, read from the database for each scrape of
``bgtasks:metrics`` (:mod:`django_bgtasks.http.monitoring` puts them into
Prometheus' text format): what the admin and ``bgtasks list`` show, counted.

Every number comes from the lease database at the moment of the read, by the
database's clock, so any replica answers alike and nothing is kept between
scrapes. A read is a bounded number of statements, each bounded by an index,
whatever the size of the history (``TaskRun`` is never read) and of the
queue's table: the lease table (one row per task), the workers' table (one
row per worker), the database's clock, the running Django Tasks (at most the
workers' threads, by their index), and for each queue with tasks (a loose
scan of their index), its ready tasks counted up to ``COUNT_CAP`` and the
oldest due ready task of each of its priorities, from the ready rows' index
in the claim's order (docs/benchmarks.md, "A million tasks": a ``GROUP BY``
of a million ready rows took 1.3 s).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

from django_bgtasks.choices import QueueStatus, Status
from django_bgtasks.conf import lease_backends
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations.queued import count_capped, queue_names
from django_bgtasks.operations.task_reads import task_states
from django_bgtasks.queue.lag import queue_lag

# The statuses bgtasks_queue_tasks counts: the work not done yet.
READY, RUNNING = str(QueueStatus.READY), str(QueueStatus.RUNNING)
LIVE_QUEUE_STATUSES = (READY, RUNNING)
# A running Django Task: its queue, last heartbeat and ttl.
Running = tuple[str, dt.datetime | None, float]
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
    * ``queue_paused``: by queue (the same queues, and every paused one),
      whether an operator paused it (``bgtasks pause --queue``): its ready
      tasks then wait by design, and its lag says so, not a lack of workers;
    * ``workers``: ``live`` and ``silent`` workers;
    * ``stale_leases``: leases whose holder went silent past its ttl and that
      nobody took over yet: background tasks' (status ``stale``) and running
      Django Tasks' (which a worker's poll recovers).
    """

    tasks: dict[str, int]
    queue_tasks: dict[tuple[str, str], int]
    queue_lag: dict[str, float]
    queue_paused: dict[str, bool]
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
    with QueuedTask.objects.index_reads():
        running = _running()
        ready = {queue: _ready_count(queue) for queue in queue_names()}
        lags = {queue: queue_lag(queue, now) for queue, count in ready.items() if count}
    busy = Counter(queue for queue, _updated, _ttl in running)
    paused = QueuedTask.objects.paused_queues()
    # The queues TASKS names, those with work (not only history), and the paused.
    queues = sorted(
        _configured_queues()
        | {queue for queue, count in ready.items() if count}
        | set(busy)
        | set(paused)
    )
    return ClusterCounts(
        tasks={str(status): tasks[str(status)] for status in Status},
        queue_tasks={
            (queue, status): ready.get(queue, 0) if status == READY else busy[queue]
            for queue in queues
            for status in LIVE_QUEUE_STATUSES
        },
        queue_lag={queue: lags.get(queue, 0.0) for queue in queues},
        queue_paused={queue: queue in paused for queue in queues},
        workers={LIVE: workers[LIVE], SILENT: workers[SILENT]},
        stale_leases=sum(state.stale for state in states) + _stale(running, now),
    )


def _configured_queues() -> set[str]:
    """The queues of every ``LeaseBackend`` in ``TASKS`` (Django's default
    queue for one that names none), so that their series are there at 0."""
    return {
        queue
        for params in lease_backends().values()
        for queue in params.get("QUEUES", [DEFAULT_QUEUE])
    }


def _running() -> list[Running]:
    """Each running Django Task's queue, heartbeat and ttl: the rows of the
    running tasks' index (by owner), at most the workers' threads."""
    rows = QueuedTask.objects.running().order_by("owner")
    return list(rows.values_list("queue_name", "updated_at", "ttl"))


def _ready_count(queue: str) -> int:
    """``queue``'s ready tasks, counted up to ``COUNT_CAP`` (the ready rows'
    index, in its order: a read of the cap's entries at most)."""
    ready = QueuedTask.objects.ready().filter(queue_name=queue)
    return count_capped(ready, order=("-priority", "seq")).value


def _stale(running: list[Running], now: dt.datetime) -> int:
    """Running Django Tasks whose heartbeat is older than their ttl: what
    the queue's ``recover`` statement takes back (``updated_at < now - ttl``),
    counted here without writing (the silent ones a poll has not recovered yet)."""
    return sum(
        1
        for _queue, updated_at, ttl in running
        if updated_at is not None and (now - updated_at).total_seconds() > ttl
    )
