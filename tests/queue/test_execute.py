"""Running one queued Django Task under its lease (queue/execute.py,
``execute()`` and ``QueuedLease``), on every queue engine: how each end is
recorded (a failure retried while attempts remain, a return value that
can't be stored failed for good, any ``BaseException``, a ``task_started``
receiver that raises, an operator's cancel, a worker's graceful stop), the
progress written through the lease, ``task_lease()``, and a heartbeat that
keeps a long task's lease."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from django.test import override_settings

from django_bgtasks import compat
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.execute import execute, task_lease
from django_bgtasks.worker.loop import Worker
from tests import djtasks
from tests.queue.test_backend import _thread, _wait_for, finished, run_ready


def test_a_failure_is_retried_while_attempts_remain(tasks_alias: str) -> None:
    result = djtasks.fails_first.using(backend="retrying").enqueue()
    assert run_ready() == 2
    result.refresh()
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert len(result.worker_ids) == 2
    [error] = result.errors
    assert error.exception_class is RuntimeError


def test_failures_end_failed_after_max_attempts(tasks_alias: str) -> None:
    result = djtasks.fails.using(backend="retrying").enqueue("again")
    assert run_ready() == 3
    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [ValueError] * 3


def test_an_unencodable_return_value_fails_the_task(tasks_alias: str) -> None:
    result = finished(djtasks.returns_unencodable.enqueue())
    assert result.status == compat.TaskResultStatus.FAILED
    assert "JSON" in result.errors[0].traceback


def test_a_return_value_that_cant_be_stored_fails_the_task_which_never_runs_again(
    tasks_alias: str,
) -> None:
    """Its work was done (here: one row written), so it must not be retried
    for a value it can't store: FAILED at once, with the encoding error, as
    Django's own backends end it (docs/django-tasks.md)."""
    from tests.testapp.models import Counter

    result = djtasks.writes_then_returns_a_set.using(backend="retrying").enqueue(
        tasks_alias, "unstorable"
    )
    ran = run_ready()
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert (ran, row.status, row.attempts, row.max_attempts) == (1, "FAILED", 1, 3)
    assert row.return_value is None
    [error] = row.errors
    assert error["exception_class_path"] == "builtins.TypeError"
    assert "return value is not JSON-serialisable" in error["traceback"]
    assert list(Counter.objects.using(tasks_alias).values_list("name", flat=True)) == [
        "unstorable-1"
    ]
    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [TypeError]


def test_a_task_started_receiver_that_raises_fails_that_attempt(
    tasks_alias: str, tmp_path: Any
) -> None:
    """Signals are sent with send(), as Django's backends send them; one that
    raises in task_started fails the attempt like the task raising (as in
    django-tasks-db's worker), and never leaves the row RUNNING."""

    def refuses(sender: Any, task_result: Any, **kwargs: Any) -> None:
        raise RuntimeError("the receiver refuses")

    path = tmp_path / "ran"
    result = djtasks.record.using(backend="retrying").enqueue(str(path), "key")
    compat.task_started.connect(refuses)
    try:
        claim = QueuedTask.objects.claim("test-worker", queues=None)
        assert claim is not None
        with contextlib.suppress(RuntimeError):  # (it used to escape execute)
            execute(claim)
        row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
        assert (row.status, row.attempts) == ("READY", 1)  # retried: attempts remain
        [error] = row.errors
        assert error["exception_class_path"] == "builtins.RuntimeError"
        assert "the receiver refuses" in error["traceback"]
        assert run_ready() == 2
    finally:
        compat.task_started.disconnect(refuses)
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert (row.status, row.attempts, len(row.errors)) == ("FAILED", 3, 3)
    assert not path.exists()  # the task itself never ran


@pytest.mark.parametrize("kind", sorted(djtasks.BASE_EXCEPTIONS))
def test_a_task_raising_any_base_exception_fails_and_its_queue_thread_goes_on(
    tasks_alias: str, kind: str
) -> None:
    """In a queue thread a KeyboardInterrupt, SystemExit, GeneratorExit or a
    task's own BaseException can only come from the task (the command turns
    SIGINT into a graceful stop): it fails that task, and the one thread of a
    worker with concurrency 1 runs the next."""
    raising = djtasks.raises_base_exception.enqueue(kind)
    after = djtasks.add.enqueue(2, 3)
    Worker([], concurrency=1, poll=0.05, run_queued=True).run(once=True)
    first = QueuedTask.objects.using(tasks_alias).get(uuid=raising.id)
    assert (first.status, first.attempts) == ("FAILED", 1)
    [error] = first.errors
    raised = djtasks.BASE_EXCEPTIONS[kind]
    assert error["exception_class_path"] == f"{raised.__module__}.{raised.__qualname__}"
    assert f"{kind} from the task" in error["traceback"] and "Traceback" in error["traceback"]
    second = QueuedTask.objects.using(tasks_alias).get(uuid=after.id)
    assert (second.status, second.return_value) == ("SUCCESSFUL", 5)


def test_cancel_while_running_stops_it_at_its_next_check(tasks_alias: str, tmp_path: Any) -> None:
    started = tmp_path / "started"
    result = djtasks.until_cancelled.using(backend="retrying").enqueue(str(started), 30)
    claim = QueuedTask.objects.claim("w", queues=None)
    assert claim is not None
    outcome: list[str] = []
    thread = _thread(lambda: outcome.append(execute(claim)))
    try:
        _wait_for(started.exists)
        assert QueuedTask.objects.cancel(result.id) == "RUNNING"
        thread.join(10)  # the heartbeat (every ttl/3) brings the cancel
    finally:
        thread.join(30)
    assert outcome == ["FAILED"]  # not retried, though attempts remain
    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    assert result.errors[0].exception_class.__name__ == "TaskCancelled"


def test_a_graceful_stop_puts_the_task_back_without_using_an_attempt(
    tasks_alias: str, tmp_path: Any
) -> None:
    started = tmp_path / "started"
    result = djtasks.until_cancelled.enqueue(str(started), 30)
    claim = QueuedTask.objects.claim("stopping-worker", queues=None)
    assert claim is not None
    stopping = threading.Event()
    outcome: list[str] = []
    thread = _thread(lambda: outcome.append(execute(claim, stopping=stopping)))
    _wait_for(started.exists)
    stopping.set()
    thread.join(10)
    assert outcome == ["READY"]
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert (row.status, row.attempts, row.errors) == ("READY", 0, [])
    again = QueuedTask.objects.claim("next-worker", queues=None)
    assert again is not None and again.token > claim.token and again.attempts == 1


def test_progress_is_written_through_the_lease(tasks_alias: str) -> None:
    result = finished(djtasks.progress.enqueue(3))
    assert result.return_value == 3
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert row.progress == {"done": 3, "total": 3}


def test_task_lease_outside_a_run_is_a_lookup_error() -> None:
    with pytest.raises(LookupError):
        task_lease()


# A heartbeat every 0.25 s, not the default third of the ttl: in a CI
# rehearsal of 2026-12-04 (MariaDB, a loaded machine) a renewal came over
# 1.3 s late once, and the lease expired under a live task. Why is not
# proven. A lock wait beside recover() was found and removed (MariaDB's
# recover locked every live running row it read; a heartbeat waited for
# it: tests/db/mysql/test_queue.py), but with one query a statement, as
# here, that wait lasts milliseconds; 45 runs of this test, quiet and under
# load, saw renewals at most 58 ms late. This interval leaves 1.75 s of
# slack against the 2 s ttl for a thread a loaded machine stalls.
@override_settings(BGTASKS_HEARTBEAT_INTERVAL=0.25)
def test_heartbeats_keep_a_long_task_alive(tasks_alias: str, tmp_path: Any) -> None:
    # ttl 2 s: a 3 s task that never calls check() stays held.
    started = tmp_path / "started"
    result = djtasks.sleeps.using(backend="retrying").enqueue(str(started), 3)
    claim = QueuedTask.objects.claim("w", queues=None)
    assert claim is not None and claim.ttl == 2
    thread = _thread(execute, claim)
    _wait_for(started.exists)
    recovered = []
    while thread.is_alive():
        recovered += QueuedTask.objects.recover()
        thread.join(0.2)
    assert recovered == []
    result.refresh()
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.return_value == "slept"
