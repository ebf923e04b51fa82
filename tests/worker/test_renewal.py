"""A worker's one renewal of every lease it holds: the renewer that sends
it once a beat (django_bgtasks/worker/renewal.py), in a worker running here
on every vendor. (The statement itself, ``BackgroundTask.objects.work.renew_many``:
tests/core/test_claims.py.)"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import connections, transaction
from django.db.backends.signals import connection_created

from django_bgtasks import LeaseLost, RunningLease, TaskCancelled
from django_bgtasks.choices import Outcome
from django_bgtasks.core import store
from django_bgtasks.db import engines
from django_bgtasks.db.mysql.leases import MYSQL_STEP
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun
from django_bgtasks.worker.loop import Worker
from tests import djtasks
from tests.dbtools import a_worker_runs
from tests.procs import wait_until
from tests.worker.test_loop import make_task


def _heartbeat(alias: str, model: type, key: str, value: object) -> dt.datetime:
    updated: dt.datetime = model.objects.using(alias).get(**{key: value}).updated_at
    return updated


# --- the renewer, in a worker running here ---------------------------------------------

# A ttl of 2 s: each lease's own heartbeat would renew it every 2/3 s.
TTL = 2.0
INTERVAL = TTL / 3
# What a beat may take beyond its interval here (a statement, a busy machine).
SLACK = 0.5


class _Statements:
    """Every statement this process sends from now on, on any connection
    opened from now on (the renewer's thread opens its own): renewals of
    many leases at once, and heartbeats of one lease."""

    def __init__(self, alias: str) -> None:
        connection = connections[alias]
        single = {
            store.statements(connection).renew,
            store.statements(connection).renew_with_value,
        }
        if connection.vendor in engines.QUEUE_VENDORS:
            single.add(QueuedTask.objects._statements(connection).renew)
        # (MySQL sends a heartbeat in steps.)
        self._single = {step.strip() for text in single for step in text.split(MYSQL_STEP)}
        self.many: list[tuple[float, dict[str, Any]]] = []
        self.singles = 0
        self.counting = False
        self._lock = threading.Lock()

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if self.counting:
            with self._lock:
                if isinstance(params, dict) and "leases" in params:
                    self.many.append((time.monotonic(), json.loads(params["leases"])))
                elif sql.strip() in self._single:
                    self.singles += 1
        return execute(sql, params, many, context)

    def watch(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if self not in connection.execute_wrappers:  # (once: a connection reconnects)
            connection.execute_wrappers.append(self)


@contextlib.contextmanager
def _counted(alias: str) -> Iterator[_Statements]:
    counted = _Statements(alias)
    connection_created.connect(counted.watch)
    try:
        yield counted
    finally:
        connection_created.disconnect(counted.watch)


def _waits(release: threading.Event, seen: dict[str, Any]) -> Any:
    """A background task's body: check its lease until ``release`` is set,
    noting when it learned that it was lost or cancelled."""

    def body(lease: RunningLease) -> None:
        while not release.wait(0.02):
            try:
                lease.check()
            except (LeaseLost, TaskCancelled) as exc:
                seen[lease.name] = (time.monotonic(), type(exc).__name__)
                raise
        return None

    return body


def _started_worker(tasks: list[Any], run_queued: bool) -> tuple[Worker, threading.Thread]:
    a_worker_runs(*(task.name for task in tasks))
    for task in tasks:
        assert BackgroundTask.objects.request_run(task.name)
    worker = Worker(tasks, concurrency=4, poll=0.05, run_queued=run_queued)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    return worker, thread


def _stopped(
    worker: Worker, thread: threading.Thread, release: threading.Event, *, drained: bool = False
) -> None:
    release.set()
    if drained:
        # Let the released runs end first: a stop that came while a body was
        # between its wait and its check() would end that run interrupted.
        # (Only the background runs wait for ``release``: queued tasks are left.)
        from django_bgtasks.queue.execute import QueuedLease

        def ended() -> bool:
            held = worker.renewer.held()
            return all(isinstance(lease, QueuedLease) for lease in held)

        wait_until("the released runs ended", ended, timeout=10)
    worker.stop()
    thread.join(30)
    assert not thread.is_alive()


def test_a_worker_renews_all_its_runs_and_django_tasks_with_one_statement_a_beat(
    db_alias: str, tmp_path: Path
) -> None:
    connection = connections[db_alias]
    queued = connection.vendor in engines.QUEUE_VENDORS  # (not on MariaDB yet)
    release, seen = threading.Event(), {}
    tasks = [make_task(f"renew-{n}", _waits(release, seen), ttl=TTL) for n in range(3)]
    with _counted(db_alias) as counted:
        if queued:
            for _ in range(2):
                djtasks.until_cancelled.using(backend="short").enqueue(str(tmp_path / "q"), 6)
        worker, thread = _started_worker(tasks, run_queued=queued)
        try:
            held = 5 if queued else 3
            wait_until("every lease held", lambda: len(worker.renewer.held()) == held)
            counted.counting = True
            time.sleep(4 * INTERVAL + 0.1)
            counted.counting = False
        finally:
            _stopped(worker, thread, release, drained=True)
    # One renewal a beat, naming every lease held; no heartbeat of one lease.
    assert counted.singles == 0
    beats = [at for at, _ in counted.many]
    if connection.vendor == "sqlite":  # two statements in one transaction
        beats = beats[::2]
    assert 3 <= len(beats) <= 5, beats
    assert all(later - earlier >= INTERVAL - 0.05 for earlier, later in itertools.pairwise(beats))
    for _, leases in counted.many:
        assert len(leases["tasks"]) == 3 and len(leases["queued"]) == (2 if queued else 0)
    assert seen == {}  # nothing lost, nothing cancelled
    assert (
        sorted(run.outcome for run in TaskRun.objects.using(db_alias)) == [Outcome.SUCCEEDED] * 3
    )


def _take_over(alias: str, name: str) -> None:
    """Another owner takes the lease over (a higher token), as a claim does."""
    table = connections[alias].ops.quote_name(BackgroundTask._meta.db_table)
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET owner = 'thief', token = token + 1 WHERE name = %s", [name]
        )


def test_a_run_taken_over_and_a_run_cancelled_learn_it_within_one_beat(db_alias: str) -> None:
    release, seen = threading.Event(), {}
    body = _waits(release, seen)
    tasks = [make_task(name, body, ttl=TTL) for name in ("renew-kept", "renew-taken", "renew-off")]
    worker, thread = _started_worker(tasks, run_queued=False)
    try:
        wait_until("every lease held", lambda: len(worker.renewer.held()) == 3)
        time.sleep(INTERVAL / 2)
        _take_over(db_alias, "renew-taken")
        assert BackgroundTask.objects.request_cancel("renew-off")
        changed = time.monotonic()
        wait_until("the loss and the cancel seen", lambda: len(seen) == 2, timeout=3 * TTL)
    finally:
        _stopped(worker, thread, release, drained=True)
    assert seen["renew-taken"][1] == "LeaseLost"
    assert seen["renew-off"][1] == "TaskCancelled"
    # Within one beat, as each lease's own heartbeat saw them.
    for name in ("renew-taken", "renew-off"):
        assert seen[name][0] - changed <= INTERVAL + SLACK, (name, seen[name][0] - changed)
    assert BackgroundTask.objects.get_state("renew-taken").owner == "thief"
    assert runs_of("renew-off") == [Outcome.CANCELLED]
    assert runs_of("renew-kept") == [Outcome.SUCCEEDED]


def runs_of(name: str) -> list[str]:
    return [run.outcome for run in TaskRun.objects.for_task(name).order_by("token")]


def test_a_django_task_taken_over_or_cancelled_learns_it_within_one_beat(
    tasks_alias: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "started")
    taken = djtasks.until_cancelled.using(backend="short").enqueue(path, 10)
    cancelled = djtasks.until_cancelled.using(backend="short").enqueue(path, 10)
    worker = Worker([], concurrency=2, poll=0.05, run_queued=True)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        wait_until("both held", lambda: len(worker.renewer.held()) == 2)
        table = connections[tasks_alias].ops.quote_name(QueuedTask._meta.db_table)
        with connections[tasks_alias].cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET owner = 'thief', token = token + 1 WHERE uuid = %s",
                [QueuedTask.objects._uuid(taken.id)],
            )
        assert QueuedTask.objects.cancel(cancelled.id) == "RUNNING"
        changed = time.monotonic()
        wait_until("both ended", lambda: not worker.renewer.held(), timeout=3 * TTL)
        ended = time.monotonic()
    finally:
        worker.stop()
        thread.join(30)
    assert ended - changed <= INTERVAL + SLACK
    cancelled.refresh()
    assert cancelled.status == "FAILED"
    assert cancelled.errors[0].exception_class.__name__ == "TaskCancelled"
    row = QueuedTask.objects.using(tasks_alias).get(uuid=taken.id)
    assert (row.status, row.owner) == ("RUNNING", "thief")  # nothing written by the old holder


def test_a_fenced_transaction_holds_up_no_other_leases_renewal(server_alias: str) -> None:
    """A run that calls fence() is renewed by a heartbeat thread of its own
    from then on: its transaction holds its row, and the worker's one
    statement goes on renewing the others meanwhile. (Not on SQLite: a fenced
    transaction holds the database's write lock there, so every writer waits
    for it, whoever sends the statement.)"""
    db_alias = server_alias
    release, fenced, seen = threading.Event(), threading.Event(), {}

    # Its transaction holds the row for 2.2 s: within the ttl (4.5 s) less a
    # heartbeat interval (1.5 s), as fence() asks; the other lease beats meanwhile.
    ttl = 4.5

    def fences(lease: RunningLease) -> None:
        with transaction.atomic(using=db_alias):
            lease.fence()
            fenced.set()
            time.sleep(2.2)
        release.wait(30)
        while True:  # until its check() sees the worker's stop (the test's last step)
            lease.check()
            time.sleep(0.02)

    tasks = [
        make_task("renew-fenced", fences, ttl=ttl),
        make_task("renew-other", _waits(release, seen), ttl=ttl),
    ]
    worker, thread = _started_worker(tasks, run_queued=False)
    try:
        assert fenced.wait(30)
        # (renew-other may start after renew-fenced fenced: wait for its lease.)
        wait_until(
            "renew-other's lease taken",
            lambda: _heartbeat(db_alias, BackgroundTask, "name", "renew-other") is not None,
        )
        before = _heartbeat(db_alias, BackgroundTask, "name", "renew-other")
        time.sleep(1.8)
        # Renewed meanwhile, by the worker's statement; the fenced run by its own thread.
        assert _heartbeat(db_alias, BackgroundTask, "name", "renew-other") > before
        assert [lease.name for lease in worker.renewer.held()] == ["renew-other"]
    finally:
        # renew-other ends first (drained); renew-fenced only at the stop.
        _stopped(worker, thread, release, drained=True)
    assert runs_of("renew-fenced") == [Outcome.INTERRUPTED]  # (its check() saw the stop)
    assert runs_of("renew-other") == [Outcome.SUCCEEDED]


def test_a_coalesced_value_is_written_at_its_deadline_not_at_the_next_beat(
    db_alias: str,
) -> None:
    """update()'s coalescing: a value that waits is written by the renewer
    at its deadline (BGTASKS_PROGRESS_INTERVAL, 0.5 s), as the run's own
    heartbeat thread wrote it, long before the next beat (every 2 s here)."""
    release, reported = threading.Event(), threading.Event()

    def reports(lease: RunningLease) -> None:
        lease.update(1)  # written at once
        lease.update(2)  # waits: it came within the interval
        reported.set()
        release.wait(30)

    worker, thread = _started_worker([make_task("renew-value", reports, ttl=6)], False)
    try:
        assert reported.wait(30)
        since = time.monotonic()
        wait_until(
            "the waiting value written",
            lambda: BackgroundTask.objects.get_state("renew-value").value == 2,
            timeout=5,
            every=0.02,
        )
        assert time.monotonic() - since < 1.5  # the next beat would be 2 s after the claim
    finally:
        _stopped(worker, thread, release)


def test_a_lease_due_sooner_than_the_renewers_wait_wakes_it(db_alias: str) -> None:
    """The renewer sleeps until its next beat and is woken by a lease added
    only when that lease is due sooner (renewal.py's ``_sleeping_until``): a
    run of ttl 3 s started while it sleeps out a 20 s interval is renewed
    every second from its start, never lost."""
    release, seen = threading.Event(), {}
    slow = make_task("renew-slow", _waits(release, seen), ttl=60)
    fast = make_task("renew-fast", _waits(release, seen), ttl=3)
    a_worker_runs("renew-slow", "renew-fast")
    assert BackgroundTask.objects.request_run("renew-slow")
    worker = Worker([slow, fast], concurrency=4, poll=0.05, run_queued=False)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        wait_until("the slow run held", lambda: len(worker.renewer.held()) == 1)
        time.sleep(0.3)  # the renewer is asleep until the slow run's beat, 20 s on
        assert BackgroundTask.objects.request_run("renew-fast")
        wait_until("the fast run held", lambda: len(worker.renewer.held()) == 2)
        first = _heartbeat(db_alias, BackgroundTask, "name", "renew-fast")
        time.sleep(4.5)  # one and a half of its ttls: unrenewed, it would be lost
        assert _heartbeat(db_alias, BackgroundTask, "name", "renew-fast") > first
        assert len(worker.renewer.held()) == 2
    finally:
        _stopped(worker, thread, release, drained=True)
    assert seen == {}  # neither run lost its lease
    assert (
        sorted(run.outcome for run in TaskRun.objects.using(db_alias)) == [Outcome.SUCCEEDED] * 2
    )
