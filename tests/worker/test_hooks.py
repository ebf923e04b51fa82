"""What a worker tells its hooks (worker/hooks.py, ``WorkerHooks``), in this
process on every database: each part calls the hook where its fact is
known (a background run reaped, a Django Task's start and end, each renewal
statement), and a worker made without hooks calls nothing. (The one kind
the app ships, the worker's metrics: tests/worker/test_prometheus.py.)"""

from __future__ import annotations

import threading
import time
from typing import Any

from django_bgtasks import RunningLease
from django_bgtasks.queue.manager import Claim
from django_bgtasks.worker.hooks import WorkerHooks
from django_bgtasks.worker.loop import Worker
from tests import djtasks
from tests.dbtools import a_worker_runs
from tests.worker.test_loop import make_task, objects


def test_a_worker_without_metrics_port_has_no_metrics(refusal_alias: str) -> None:
    worker = Worker([make_task("m-ok", succeeds)], poll=0.05)
    assert worker.hooks is None
    assert worker._runs.hooks is worker.renewer.hooks is worker.queue_threads.hooks is None


class Told:
    """Hooks that note each call, in the order the worker's threads made them."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.renewals: list[float] = []
        self._lock = threading.Lock()

    def run_ended(self, running: RunningLease) -> None:
        with self._lock:
            self.calls.append(("run_ended", running.name, running.outcome))

    def queued_started(self, claim: Claim) -> None:
        with self._lock:
            self.calls.append(("queued_started", claim.task_path))

    def queued_ended(self, claim: Claim, status: str, duration: float, stopping: bool) -> None:
        with self._lock:
            self.calls.append(("queued_ended", claim.task_path, status, stopping))
            assert duration >= 0

    def renewed(self, seconds: float) -> None:
        with self._lock:
            self.renewals.append(seconds)


def succeeds(lease: RunningLease) -> str:
    return "ok"


def sleeps(lease: RunningLease) -> str:
    time.sleep(0.5)  # long enough for the renewer to beat (every 0.1 s here)
    return "slept"


def test_each_part_of_a_worker_tells_its_hooks_where_each_fact_is_known(
    tasks_alias: str, settings: Any
) -> None:
    settings.BGTASKS_HEARTBEAT_INTERVAL = 0.1
    tasks = [make_task("h-ok", succeeds), make_task("h-slow", sleeps)]
    a_worker_runs(*(task.name for task in tasks))
    for task in tasks:
        assert objects.request_run(task.name) is True
    djtasks.add.enqueue(1, 2)
    told = Told()
    hooks: WorkerHooks = told
    worker = Worker(tasks, concurrency=2, poll=0.05, queues=["default"], hooks=hooks)
    assert worker.hooks is worker._runs.hooks is worker.renewer.hooks is told
    assert worker.queue_threads.hooks is told
    worker.run(once=True)
    assert sorted(call for call in told.calls if call[0] == "run_ended") == [
        ("run_ended", "h-ok", "succeeded"),
        ("run_ended", "h-slow", "succeeded"),
    ]
    assert [call for call in told.calls if call[0].startswith("queued")] == [
        ("queued_started", "tests.djtasks.add"),
        ("queued_ended", "tests.djtasks.add", "SUCCESSFUL", False),
    ]
    assert told.renewals and all(seconds >= 0 for seconds in told.renewals)
