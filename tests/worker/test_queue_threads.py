"""A worker's Django Tasks threads (worker/queue_threads.py), on every queue
engine: their claims in rounds, one statement each for the ends its threads
bring and the tasks they want (how long a round waits for threads coming
back), the give-back of a task whose claim lost its reply, the recovery of
lost workers' tasks at most once a second, a thread that outlives what a
receiver raises, and the log line of each run's start and end."""

from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError, connections

from django_bgtasks import compat
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.execute import execute
from django_bgtasks.queue.manager import QueueManager
from django_bgtasks.worker.loop import Worker
from tests import djtasks
from tests.worker.test_idle import _status, _wait_for, running


def test_a_give_back_owed_is_made_by_the_next_poll_with_nothing_ready(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch, probes: list[bool]
) -> None:
    """A claim that committed and lost its reply leaves its task RUNNING under
    the worker, so no read finds a task ready: the worker's next poll claims
    anyway, and its round gives the task back and runs it, long before its
    ttl (120 s), on every engine."""
    finish_and_claim, lost = QueueManager.finish_and_claim, []

    def losing(self: QueueManager, *args: Any, **kwargs: Any) -> Any:
        ended, claimed = finish_and_claim(self, *args, **kwargs)
        if claimed and not lost:
            lost.append(claimed[0].uuid)
            raise OperationalError("the reply was lost")  # after the claim committed
        return ended, claimed

    monkeypatch.setattr(QueueManager, "finish_and_claim", losing)
    with running(Worker([], concurrency=2, poll=0.1, run_queued=True)):
        _wait_for(lambda: len(probes) >= 2)  # idle, polling
        result = djtasks.add.enqueue(2, 3)
        _wait_for(lambda: _status(tasks_alias, result.id) == "SUCCESSFUL")
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert lost == [row.uuid] and row.attempts == 1 and row.return_value == 5


def test_a_retry_its_own_end_made_ready_is_claimed_next_by_its_thread(tasks_alias: str) -> None:
    """The round that writes an end claims from the table as it was before
    it: a retry it makes ready is not among what it can take. Its thread
    claims again at once, not at its next poll (30 s here), and ``--once``
    doesn't stop before it."""
    from django_bgtasks import compat

    result = djtasks.fails_first.using(backend="retrying").enqueue()
    began = time.monotonic()
    Worker([], concurrency=1, poll=30, run_queued=True).run(once=True)
    assert time.monotonic() - began < 20
    result.refresh()
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.attempts == 2


def test_a_queue_workers_poll_reads_no_lease_and_recovers_at_most_once_a_second(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker of the queue alone (no background task, no task schedule)
    has nothing to read in the lease table at its polls, and recovers the
    queued tasks of lost workers at its first poll, then not again before
    RECOVER_EVERY_SECONDS: at ``--poll 0.05`` a recovery every poll cost a
    drain 9 % of its rate."""
    from django.test.utils import CaptureQueriesContext

    from django_bgtasks.models import BackgroundTask
    from django_bgtasks.worker import queue_threads
    from tests.queue.test_backend import backdate

    def lost_task() -> QueuedTask:
        result = djtasks.add.enqueue(1, 2)
        assert QueuedTask.objects.claim("killed-worker", queues=None) is not None
        backdate(tasks_alias, 3600)
        return QueuedTask.objects.using(tasks_alias).get(uuid=result.id)

    monkeypatch.setattr(queue_threads, "RECOVER_EVERY_SECONDS", 3600.0)
    first = lost_task()
    worker = Worker([], concurrency=2, poll=0.05, run_queued=True)
    with CaptureQueriesContext(connections[tasks_alias]) as queries:
        assert worker.tick() == 0
    first.refresh_from_db()
    assert first.status == "FAILED"  # recovered at the first poll (max_attempts 1)
    leases = BackgroundTask._meta.db_table
    assert queries.captured_queries
    assert not [q["sql"] for q in queries.captured_queries if leases in q["sql"]]

    second = lost_task()
    worker.tick()
    second.refresh_from_db()
    assert second.status == "RUNNING"  # not yet: the last recovery was just now
    Worker([], concurrency=2, poll=0.05, run_queued=True).tick()
    second.refresh_from_db()
    assert second.status == "FAILED"


def test_a_worker_writes_the_ends_of_runs_that_end_together_in_one_statement(
    tasks_alias: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four threads running tasks of 0.1 s, while each statement of ends takes
    0.1 s more (as on a loaded server): the ends that come meanwhile share
    the next ``finish_and_claim`` (counted as they reach the real one), and
    each run's end is written once, its row as the run returned it."""
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.manager import QueueManager
    from django_bgtasks.worker.loop import Worker
    from tests import djtasks

    sizes: list[int] = []
    finish_and_claim = QueueManager.finish_and_claim

    def counted(self: QueueManager, ends: Any, *args: Any, **kwargs: Any) -> Any:
        if ends:
            sizes.append(len(ends))
            time.sleep(0.1)
        return finish_and_claim(self, ends, *args, **kwargs)

    monkeypatch.setattr(QueueManager, "finish_and_claim", counted)
    record = tmp_path / "record"
    ids = [djtasks.runs_checking.enqueue(str(record), f"k{n}", 0.1).id for n in range(16)]
    Worker([], concurrency=4, poll=0.05, run_queued=True).run(once=True)
    rows = QueuedTask.objects.using(tasks_alias).filter(uuid__in=ids)
    assert {row.status for row in rows} == {"SUCCESSFUL"}
    assert all(row.return_value["token"] == row.token for row in rows)
    assert sum(sizes) == 16 and max(sizes) > 1, sizes


def _round_sizes(monkeypatch: pytest.MonkeyPatch, linger: float) -> list[int]:
    """The ends of each ``finish_and_claim`` of the worker's rounds (with
    ``linger`` as its rounds' linger), counted as they reach the real one."""
    from django_bgtasks.queue.manager import QueueManager
    from django_bgtasks.worker import queue_threads

    monkeypatch.setattr(queue_threads, "ROUND_LINGER_SECONDS", linger)
    sizes: list[int] = []
    finish_and_claim = QueueManager.finish_and_claim

    def counted(self: QueueManager, ends: Any, *args: Any, **kwargs: Any) -> Any:
        if ends:
            sizes.append(len(ends))
        return finish_and_claim(self, ends, *args, **kwargs)

    monkeypatch.setattr(QueueManager, "finish_and_claim", counted)
    return sizes


def test_a_workers_rounds_of_short_tasks_carry_every_thread(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four threads draining 60 no-op tasks, with a linger of 0.5 s: once
    each thread has ended a task, each round waits for the threads the last
    one handed a task to, and carries all four ends."""
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.worker.loop import Worker
    from tests import djtasks

    sizes = _round_sizes(monkeypatch, 0.5)
    ids = [djtasks.noop.enqueue().id for _ in range(60)]
    Worker([], concurrency=4, poll=0.05, run_queued=True).run(once=True)
    rows = QueuedTask.objects.using(tasks_alias).filter(uuid__in=ids)
    assert {row.status for row in rows} == {"SUCCESSFUL"}
    assert sum(sizes) == 60
    assert sizes.count(4) >= 10, sizes


def test_a_workers_rounds_do_not_wait_for_threads_of_long_tasks(
    tasks_alias: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Four threads running tasks of 0.3 s, with a linger of 0.1 s: no
    thread is back within it, so no round waits for one (its log says how
    long it waited), though every round but the first hands out tasks."""
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.worker.loop import Worker
    from tests import djtasks

    _round_sizes(monkeypatch, 0.1)
    ids = [djtasks.sleeps.enqueue(str(tmp_path / "started"), 0.3).id for _ in range(12)]
    with caplog.at_level(logging.DEBUG, logger="django_bgtasks.worker"):
        Worker([], concurrency=4, poll=0.05, run_queued=True).run(once=True)
    rows = QueuedTask.objects.using(tasks_alias).filter(uuid__in=ids)
    assert {row.status for row in rows} == {"SUCCESSFUL"}
    rounds = [r.getMessage() for r in caplog.records if "one round for" in r.getMessage()]
    assert sum("took 0 " not in line for line in rounds) >= 4, rounds
    assert rounds and all("waited 0.0 ms" in line for line in rounds), rounds


def test_a_claim_whose_reply_was_lost_is_given_back_by_its_worker(tasks_alias: str) -> None:
    """What a claim leaves when the connection breaks after its commit: the row
    RUNNING under the worker's id, held by none of its threads. The worker's
    next claim gives it back (ready, the attempt refunded) at once, not after
    the ttl, and leaves the claims its threads hold, and other workers', alone."""
    worker = Worker([], run_queued=True)
    lost, held, others = (djtasks.add.enqueue(n, n) for n in (1, 2, 3))
    orphan = QueuedTask.objects.claim(worker.id, queues=None)  # its reply "lost"
    mine = worker.queue_threads.claim(give_back=False)  # held by a thread of the worker
    theirs = QueuedTask.objects.claim("other-worker", queues=None)
    assert orphan and mine and theirs
    assert [c.uuid for c in (orphan, mine, theirs)] == [
        uuid.UUID(r.id) for r in (lost, held, others)
    ]
    # Given back, it is the one ready task again, and the same step claims it,
    # under a higher token, as the first attempt still.
    again = worker.queue_threads.claim(give_back=True)
    assert again is not None and again.uuid == orphan.uuid
    assert again.token > orphan.token and again.attempts == 1
    row = QueuedTask.objects.using(tasks_alias).get(uuid=orphan.uuid)
    assert (row.status, row.attempts, row.worker_ids) == ("RUNNING", 1, [worker.id])
    for claim in (mine, theirs):
        assert QueuedTask.objects.using(tasks_alias).get(seq=claim.seq).status == "RUNNING"
    assert QueuedTask.objects.renew(orphan) is None  # the lost claim writes nothing
    # Nothing more to give back: the worker now holds what it claimed.
    assert worker.queue_threads.claim(give_back=True) is None
    assert QueuedTask.objects.using(tasks_alias).running().count() == 3
    execute(again)
    assert djtasks.add.get_result(lost.id).return_value == 2


def test_a_queue_thread_outlives_a_base_exception_from_outside_the_task(tasks_alias: str) -> None:
    """The thread's last resort: a ``task_finished`` receiver's KeyboardInterrupt
    (after the row ended) is logged, and the thread runs the next task."""
    interrupted: list[str] = []

    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        if not interrupted:
            interrupted.append(task_result.id)
            raise KeyboardInterrupt("from a receiver")

    first, second = djtasks.add.enqueue(1, 1), djtasks.add.enqueue(2, 2)
    compat.task_finished.connect(receive)
    try:
        Worker([], concurrency=1, poll=0.05, run_queued=True).run(once=True)
    finally:
        compat.task_finished.disconnect(receive)
    assert interrupted == [first.id]
    rows = QueuedTask.objects.using(tasks_alias).order_by("seq")
    assert [(row.status, row.return_value) for row in rows] == [
        ("SUCCESSFUL", 2),
        ("SUCCESSFUL", 4),
    ]
    assert str(rows[1].uuid) == second.id


def test_the_worker_logs_each_queued_run_at_info(
    tasks_alias: str, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level("INFO", logger="django_bgtasks")
    good, bad = djtasks.sleeps.enqueue(str(tmp_path / "said"), 0.2), djtasks.fails.enqueue("no")
    worker = Worker([], concurrency=1, poll=0.05, queues=["default"])
    worker.run(once=True)
    records = [r for r in caplog.records if r.name == "django_bgtasks.worker"]
    lines = [r.getMessage() for r in records]
    # A worker of the queue alone names its queues as it starts.
    assert lines[0].endswith(": 0 task(s) (none), queue(s) (default), concurrency 1, poll 0.05 s")
    for result, ended, least in ((good, "SUCCESSFUL", 0.2), (bad, "FAILED", 0.0)):
        path = f"tests.djtasks.{result.task.name}"
        named = f"queued task {path} {result.id} on worker {worker.id}"
        said = f"{named} started (token 1, attempt 1, queue default)"
        assert said in lines
        # The end: how it ended, after how long, and the same in the record's extra.
        start, end = [r for r in records if r.getMessage().startswith(f"queued task {path} ")]
        assert (start.queue, start.attempt) == ("default", 1)  # type: ignore[attr-defined]
        said = re.fullmatch(
            rf"{named} \(token 1, attempt 1\) ended: {ended} "
            r"after (\S+) s",
            end.getMessage(),
        )
        assert said is not None and least <= float(said[1]) < least + 5
        assert float(said[1]) == pytest.approx(end.duration, abs=0.001)  # type: ignore[attr-defined]
        fields = ("task", "token", "owner", "attempt", "outcome")
        assert {key: getattr(end, key) for key in fields} == {
            "task": f"{path} {result.id}",
            "token": 1,
            "owner": worker.id,
            "attempt": 1,
            "outcome": ended,
        }
