"""The workers as the operator's surfaces show them (operations/workers.py),
on every database: each worker with the Django Tasks whose rows it holds (a
stale heartbeat said), the Django Tasks the recovery took back from a lost
worker as their rows say now, and a silent worker's run that was taken over
naming the run that took it over, however many runs later the row is."""

from __future__ import annotations

import uuid

from django_bgtasks.choices import WorkerRunStatus
from django_bgtasks.core.states import LostTask
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations import workers
from tests import djtasks
from tests.dbtools import backdate, backdate_worker
from tests.queue.test_backend import backdate as backdate_running

objects = BackgroundTask.objects


def _beat(worker: str, running: list[str] | None = None) -> None:
    objects.work.beat(
        worker=worker,
        host="h",
        pid=1,
        tasks=running or [],
        concurrency=2,
        running=running or [],
        ttl=10,
    )


def test_each_worker_is_listed_with_the_django_tasks_it_holds(tasks_alias: str) -> None:
    _beat("w:1:held")
    _beat("w:2:idle")
    results = [djtasks.add.enqueue(n, n) for n in range(3)]
    claims = [QueuedTask.objects.claim("w:1:held", queues=None) for _ in range(2)]
    elsewhere = QueuedTask.objects.claim("w:3:no-row", queues=None)  # a worker with no row
    assert all(claims) and elsewhere is not None
    listed = {worker.id: worker for worker in workers.workers()}
    assert sorted(listed) == ["w:1:held", "w:2:idle"]
    held = listed["w:1:held"].django_tasks
    assert sorted((task.id, task.task, task.token, task.stale) for task in held) == sorted(
        (str(claim.uuid), "tests.djtasks.add", claim.token, False) for claim in claims if claim
    )
    assert listed["w:2:idle"].django_tasks == ()
    assert {task.id for task in held} == {result.id for result in results[:2]}

    # Heartbeats older than their ttl, by the database's clock: said stale.
    backdate_running(tasks_alias, 3600)
    by_worker = workers.held_tasks(objects.work.clock())
    assert sorted(by_worker) == ["w:1:held", "w:3:no-row"]
    assert [task.stale for task in by_worker["w:1:held"]] == [True, True]


def test_a_lost_workers_django_tasks_are_listed_as_their_rows_say_now(tasks_alias: str) -> None:
    _beat("w:lost")
    result = djtasks.add.using(backend="retrying").enqueue(1, 1)
    first = QueuedTask.objects.claim("w:lost", queues=None)
    assert first is not None
    backdate_running(tasks_alias, first.ttl + 1)
    assert [row[:2] for row in QueuedTask.objects.recover()] == [(first.uuid, "READY")]
    again = QueuedTask.objects.claim("w:next", queues=None)
    assert again is not None and again.uuid == first.uuid
    gone = str(uuid.uuid4())  # a row since deleted (pruned)
    assert objects.work.lost("w:lost", [result.id, gone])  # as the recovery says it
    [lost] = [worker for worker in workers.workers() if worker.id == "w:lost"]
    assert lost.lost_tasks == (
        LostTask(result.id, "tests.djtasks.add", "RUNNING", "w:next"),
        LostTask(gone),
    )
    assert workers.lost_tasks([]) == {}


def test_a_silent_workers_run_taken_over_names_the_run_that_took_it_over(
    tasks_alias: str,
) -> None:
    """The lease row names its holder now, two runs on; the history names the
    run after the lost one: that run took it over."""
    lost = objects.try_claim("o-job", "w:dead", ttl=30)
    assert lost is not None
    _beat("w:dead", running=["o-job"])
    backdate(tasks_alias, "o-job", 31)
    taker = objects.try_claim("o-job", "w:taker", ttl=30)  # records the lost run
    assert taker is not None and taker.token == lost.token + 1
    assert objects.release("o-job", "w:taker", token=taker.token)
    now = objects.try_claim("o-job", "w:now", ttl=30)
    assert now is not None
    backdate_worker(tasks_alias, "w:dead", 11)
    [reported] = [worker for worker in objects.work.workers() if worker.id == "w:dead"]
    [run] = reported.runs
    assert (run.status, run.owner, run.token) == (WorkerRunStatus.TAKEN_OVER, "w:now", now.token)

    [shown] = [worker for worker in workers.workers() if worker.id == "w:dead"]
    [run] = shown.runs
    assert (run.status, run.owner, run.token) == (
        WorkerRunStatus.TAKEN_OVER,
        "w:taker",
        taker.token,
    )
