"""operations/cluster.py: the cluster's numbers after known states, on the
surfaces' engines (the numbers come from the same statements everywhere; what
differs is where the leases live), and the bounded number of queries."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_bgtasks.background import registry
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations.cluster import cluster_counts
from tests import djtasks
from tests.dbtools import _backdate, backdate, backdate_worker

objects = BackgroundTask.objects


def test_an_empty_cluster_has_every_series_at_zero(tasks_site_alias: str) -> None:
    counts = cluster_counts()
    # Every registered task (the test app's four, and any a test module
    # imported in this process registers), none has run.
    assert counts.tasks == {
        "running": 0,
        "requested": 0,
        "cancel requested": 0,
        "stale": 0,
        "paused": 0,
        "idle": 0,
        "never run": len(registry.registered()),
    }
    # The queues TASKS' LeaseBackends name (tests/settings.py), at 0.
    assert counts.queue_tasks == {
        ("default", "READY"): 0,
        ("default", "RUNNING"): 0,
        ("other", "READY"): 0,
        ("other", "RUNNING"): 0,
    }
    assert counts.queue_lag == {"default": 0.0, "other": 0.0}
    assert counts.workers == {"live": 0, "silent": 0}
    assert counts.stale_leases == 0


def test_the_counts_follow_known_states(tasks_site_alias: str) -> None:
    alias = tasks_site_alias
    assert objects.try_claim("job-running", "a", ttl=30) is not None
    stale = objects.try_claim("job-stale", "b", ttl=5)
    assert stale is not None
    backdate(alias, "job-stale", 60)
    assert objects.request_run("surface-quick")
    assert objects.pause("surface-slow")  # paused: counted as such, not as never run
    objects.work.beat(worker="w1", host="h", pid=1, tasks=[], concurrency=1, running=[])
    objects.work.beat(worker="w2", host="h", pid=2, tasks=[], concurrency=1, running=[])
    backdate_worker(alias, "w2", 60)
    # Django Tasks: two ready on "default" (one 60 s old), one not due yet,
    # one claimed whose worker went silent.
    old = djtasks.add.enqueue(1, 2)
    djtasks.add.enqueue(3, 4)
    djtasks.add.using(run_after=timezone.now() + dt.timedelta(hours=1)).enqueue(5, 6)
    QueuedTask.objects.using(alias).filter(uuid=old.id).update(
        enqueued_at=timezone.now() - dt.timedelta(seconds=60)
    )
    claim = QueuedTask.objects.claim("w1", queues=None)
    assert claim is not None and str(claim.uuid) == old.id  # the oldest
    _backdate(alias, QueuedTask, "seq", claim.seq, 600)
    counts = cluster_counts()
    assert counts.tasks["running"] == 1
    assert counts.tasks["stale"] == 1
    assert counts.tasks["requested"] == 1
    assert counts.tasks["paused"] == 1
    # surface-quick and surface-slow have a row now
    assert counts.tasks["never run"] == len(registry.registered()) - 2
    assert counts.workers == {"live": 1, "silent": 1}
    assert counts.queue_tasks == {
        ("default", "READY"): 2,
        ("default", "RUNNING"): 1,
        ("other", "READY"): 0,
        ("other", "RUNNING"): 0,
    }
    # The oldest due ready task is the second one, enqueued just now; the
    # claimed one (60 s old) no longer counts, nor does the one not due.
    assert 0 <= counts.queue_lag["default"] < 30
    assert counts.queue_lag["other"] == 0
    assert counts.stale_leases == 2  # job-stale, and the silent Django Task


def test_finished_django_tasks_are_not_counted_and_any_queue_with_work_is(
    tasks_site_alias: str, settings: Any
) -> None:
    # A queue no backend names any more still has its waiting work counted.
    done = djtasks.add.enqueue(1, 2)
    waiting = djtasks.add.using(queue_name="other").enqueue(1, 2)
    QueuedTask.objects.cancel(done.id)  # FAILED: history, not counted
    settings.TASKS = {
        "default": {"BACKEND": "django_bgtasks.backend.LeaseBackend", "QUEUES": ["mail"]}
    }
    counts = cluster_counts()
    assert counts.queue_tasks == {
        ("mail", "READY"): 0,
        ("mail", "RUNNING"): 0,
        ("other", "READY"): 1,
        ("other", "RUNNING"): 0,
    }
    assert set(counts.queue_lag) == {"mail", "other"}
    assert QueuedTask.objects.using(tasks_site_alias).get(uuid=waiting.id).status == "READY"


def test_the_lag_is_the_oldest_due_ready_task_s_age_by_the_database_clock(
    tasks_site_alias: str,
) -> None:
    ready = djtasks.add.using(queue_name="default").enqueue(1, 2)
    QueuedTask.objects.using(tasks_site_alias).filter(uuid=ready.id).update(
        enqueued_at=timezone.now() - dt.timedelta(seconds=300)
    )
    # Due 120 s ago: ready since then, not since its enqueueing.
    due = djtasks.add.using(
        queue_name="other", run_after=timezone.now() - dt.timedelta(seconds=120)
    ).enqueue(1, 2)
    QueuedTask.objects.using(tasks_site_alias).filter(uuid=due.id).update(
        enqueued_at=timezone.now() - dt.timedelta(seconds=900)
    )
    lag = cluster_counts().queue_lag
    assert 300 <= lag["default"] < 330
    assert 120 <= lag["other"] < 150


def test_a_read_is_a_bounded_number_of_queries(tasks_site_alias: str) -> None:
    """As many queries with a long history and a big queue as with a short
    one: a constant few, and a few a queue with ready tasks (its count, and
    its lag: a priority at a time, MAX_PRIORITIES at most)."""

    def read(tasks: int, runs: int) -> list[str]:
        for n in range(runs):
            lease = objects.try_claim(f"job-{n % 5}", "a", ttl=30)
            assert lease is not None
            assert objects.release(lease.name, "a", token=lease.token)
        djtasks.add.get_backend().enqueue_many(djtasks.add, [((n, n), {})] * tasks)
        with CaptureQueriesContext(connections[tasks_site_alias]) as queries:
            cluster_counts()
        # (Not the transaction of the queue's reads: QueuedTask.objects.index_reads.)
        control = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "SELECT set_config")
        return [query["sql"] for query in queries if not query["sql"].strip().startswith(control)]

    objects.work.beat(worker="w", host="h", pid=1, tasks=[], concurrency=1, running=["job-0"])
    backdate_worker(tasks_site_alias, "w", 60)
    few = read(tasks=2, runs=2)
    # list_states, list_workers (+ list_states for a silent worker's runs),
    # the clock, the running rows, the queues with tasks; then the one
    # queue's ready count and its lag: its highest priority, that priority's
    # oldest due task, and the next priority (none); the paused queues.
    assert len(few) == 11, [sql.split()[:12] for sql in few]
    assert len(read(tasks=300, runs=200)) == len(few)


def test_the_counts_on_every_engine(db_alias: str) -> None:
    # The queue's reads are the ORM's, on every vendor (MySQL/MariaDB has the
    # table, empty while LeaseBackend does not run there).
    assert objects.try_claim("job-running", "a", ttl=30) is not None
    assert objects.try_claim("job-stale", "b", ttl=5) is not None
    backdate(db_alias, "job-stale", 60)
    objects.work.beat(worker="w1", host="h", pid=1, tasks=[], concurrency=1, running=[])
    counts = cluster_counts()
    assert (counts.tasks["running"], counts.tasks["stale"]) == (1, 1)
    assert counts.workers == {"live": 1, "silent": 0}
    assert counts.stale_leases == 1
    assert set(counts.queue_lag.values()) == {0.0}
