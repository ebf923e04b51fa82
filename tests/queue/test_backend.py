"""The Django Tasks backend, ``django_bgtasks.backend.LeaseBackend`` (issue 13).

The first part is behaviour every backend shares, run on ours and on Django's
ImmediateBackend, through Django's public Tasks API only; with ours, the
ready tasks are then run here by the worker's own code (``run_ready``), as
``bgtasks worker`` runs them. The rest is ours alone: transactions, results
read back, priorities and ``run_after``, recovery of a lost worker's task,
cancel before a start, an operator's retry, fencing, unique tasks and the
system checks. How a run ends, once a worker runs it (retries, a cancel
while it runs, a graceful stop, progress): tests/queue/test_execute.py; the
worker's queue threads: tests/worker/test_queue_threads.py. Real worker
processes are tests/faults/test_backend_workers.py's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.test import override_settings

from django_bgtasks import compat
from django_bgtasks.backend import LeaseBackend
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.execute import execute
from tests import djtasks
from tests.procs import run_python

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["default", "immediate"]


def run_ready(*, stopping: threading.Event | None = None, queues: list[str] | None = None) -> int:
    """Run every ready task here, one after another, as a worker does. How many ran."""
    ran = 0
    while (claim := QueuedTask.objects.claim("test-worker", queues=queues)) is not None:
        execute(claim, stopping=stopping)
        ran += 1
    return ran


def finished(result: Any) -> Any:
    """``result`` once it has run: ours once a worker ran it; ImmediateBackend's as is."""
    if result.backend != "immediate":
        run_ready()
        result.refresh()
    return result


def backdate(alias: str, seconds: float) -> None:
    """Make every running task's heartbeat ``seconds`` older (as a killed worker's would be)."""
    connection = connections[alias]
    table = connection.ops.quote_name(QueuedTask._meta.db_table)
    if connection.vendor == "postgresql":
        sql = f"UPDATE {table} SET updated_at = updated_at - %s * interval '1 second'"
    elif connection.vendor == "mysql":
        sql = (
            f"UPDATE {table} SET updated_at = updated_at"
            " - INTERVAL ROUND(%s * 1000000) MICROSECOND"
        )
    else:
        sql = (
            f"UPDATE {table} SET updated_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', "
            "julianday(updated_at) - %s / 86400.0)"
        )
    with connection.cursor() as cursor:
        cursor.execute(sql + " WHERE status = 'RUNNING'", [seconds])


# --- shared behaviour: ours and Django's ImmediateBackend -------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_task_runs_and_returns_its_value(tasks_alias: str, backend: str) -> None:
    result = djtasks.add.using(backend=backend).enqueue(2, 3)
    assert isinstance(result.id, str) and result.id
    result = finished(result)
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.is_finished
    assert result.started_at is not None and result.finished_at is not None
    assert result.started_at <= result.finished_at
    assert result.last_attempted_at is not None
    assert len(result.worker_ids) == 1
    assert result.errors == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_arguments_round_trip_as_json(tasks_alias: str, backend: str) -> None:
    result = djtasks.echo.using(backend=backend).enqueue(1, (2, 3), "x", k={"a": [None, True]})
    assert result.args == [1, [2, 3], "x"]
    assert result.kwargs == {"k": {"a": [None, True]}}
    result = finished(result)
    assert result.return_value == {"args": [1, [2, 3], "x"], "kwargs": {"k": {"a": [None, True]}}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_arguments_json_cannot_encode_are_refused(tasks_alias: str, backend: str) -> None:
    with pytest.raises(TypeError):
        djtasks.echo.using(backend=backend).enqueue(object())
    assert QueuedTask.objects.using(tasks_alias).count() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failure_is_recorded_with_its_traceback(tasks_alias: str, backend: str) -> None:
    result = finished(djtasks.fails.using(backend=backend).enqueue("it broke"))
    assert result.status == compat.TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is ValueError
    assert "it broke" in error.traceback and "Traceback" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_task_that_calls_sys_exit_fails(tasks_alias: str, backend: str) -> None:
    result = finished(djtasks.exits.using(backend=backend).enqueue())
    assert result.status == compat.TaskResultStatus.FAILED
    assert result.errors[0].exception_class is SystemExit


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_task_taking_context_gets_its_result_and_attempt(tasks_alias: str, backend: str) -> None:
    result = finished(djtasks.with_context.using(backend=backend).enqueue(7))
    assert result.return_value == {"id": result.id, "attempt": 1, "n": 7}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_async_task_runs(tasks_alias: str, backend: str) -> None:
    result = finished(djtasks.add_async.using(backend=backend).enqueue(4, 5))
    assert result.return_value == 9


@pytest.mark.parametrize("backend", BACKENDS)
def test_aenqueue(tasks_alias: str, backend: str) -> None:
    result = finished(async_to_sync(djtasks.add.using(backend=backend).aenqueue)(1, 1))
    assert result.return_value == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unknown_queue_is_an_invalid_task(backend: str) -> None:
    with pytest.raises(compat.InvalidTask, match="nope"):
        djtasks.add.using(backend=backend, queue_name="nope")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lambda_or_nested_function_is_an_invalid_task(backend: str) -> None:
    def nested() -> None:
        pass

    for function in (nested, lambda: None):
        with pytest.raises(compat.InvalidTask, match="module level"):
            compat.Task(func=function, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_priority_out_of_range_is_an_invalid_task(backend: str) -> None:
    with pytest.raises(compat.InvalidTask, match="priority"):
        djtasks.add.using(backend=backend, priority=101)


# --- ours alone ------------------------------------------------------------------------


# Every bad value of each of LeaseTask's options, and the reason it must name.
BAD_OPTIONS = [
    ("max_attempts", 0, "between 1 and 1000, not 0"),
    ("max_attempts", 1001, "between 1 and 1000"),
    ("max_attempts", 2.0, "must be an int, not float"),
    ("max_attempts", True, "must be an int, not bool"),
    ("max_attempts", "3", "must be an int, not str"),
    ("retry_delay", 0, "above 0 and at most 3600"),
    ("retry_delay", -1.0, "above 0"),
    ("retry_delay", 3600.5, "at most 3600 seconds"),
    ("retry_delay", float("nan"), "not nan"),
    ("retry_delay", float("inf"), "not inf"),
    ("retry_delay", True, "number of seconds, not bool"),
    ("retry_delay", "1", "number of seconds, not str"),
    ("timeout", 0, "above 0 and at most 604800"),
    ("timeout", -5, "above 0"),
    ("timeout", 604800.1, "at most 604800 seconds"),
    ("timeout", float("nan"), "not nan"),
    ("timeout", [1], "number of seconds, not list"),
]


@pytest.mark.parametrize(("option", "value", "reason"), BAD_OPTIONS)
def test_a_bad_option_is_an_invalid_task_with_its_reason(
    refusal_alias: str, option: str, value: Any, reason: str
) -> None:
    said = f"'tests.djtasks.add': {option} .*{re.escape(reason)}"
    with pytest.raises(compat.InvalidTask, match=said):
        dataclasses.replace(djtasks.add, **{option: value})
    # Through @task(...) too, where it hands the keywords on (Django 6.1+, the backport).
    with pytest.raises(compat.InvalidTask, match=re.escape(reason)):
        djtasks.task(**{option: value})(djtasks.add.func)
    assert QueuedTask.objects.using(refusal_alias).count() == 0


def test_the_options_reach_the_task_and_max_attempts_overrides_the_backends(
    tasks_alias: str,
) -> None:
    """@task(...) declares them; the row's max_attempts is the task's own,
    over the backend's MAX_ATTEMPTS (1 on "default", 3 on "retrying")."""
    task = djtasks.fails_with_backoff
    assert (task.max_attempts, task.retry_delay, task.timeout) == (4, 0.2, None)
    assert djtasks.checks_past_timeout.timeout == 0.5
    own = task.enqueue("unused")
    fewer = djtasks.fails_once_only.using(backend="retrying").enqueue("unused")
    plain = djtasks.add.using(backend="retrying").enqueue(1, 2)
    stored = {
        str(row.uuid): row.max_attempts for row in QueuedTask.objects.using(tasks_alias).all()
    }
    assert stored == {own.id: 4, fewer.id: 1, plain.id: 3}


def test_the_retry_delay_doubles_up_to_its_cap_with_ten_percent_jitter() -> None:
    task = dataclasses.replace(djtasks.add, retry_delay=10)
    for attempt, base in [(1, 10), (2, 20), (3, 40), (9, 2560), (10, 3600), (500, 3600)]:
        delays = [task.retry_delay_for(attempt) for _ in range(200)]
        assert all(0.9 * base <= delay <= 1.1 * base for delay in delays), (attempt, delays)
        assert len(set(delays)) > 150  # jittered, not one value
        assert min(delays) < base < max(delays)
    assert djtasks.add.retry_delay_for(3) == 0.0  # no retry_delay: a retry at once


@pytest.mark.parametrize("unique", ["false", 1, None])
def test_unique_is_true_or_false_only(tasks_alias: str, unique: object) -> None:
    """``@task(unique="false")`` would have keyed the task (the string is
    true): an ``InvalidTask`` that names the value, with nothing stored."""
    with pytest.raises(compat.InvalidTask, match=f"unique must be True or False, not {unique!r}"):
        dataclasses.replace(djtasks.add, unique=unique)
    assert QueuedTask.objects.using(tasks_alias).count() == 0


@pytest.mark.parametrize("key", ["", "k" * 256])
def test_a_unique_key_that_does_not_fit_is_an_invalid_task(tasks_alias: str, key: str) -> None:
    with pytest.raises(compat.InvalidTask, match="unique key"):
        dataclasses.replace(djtasks.nightly_report, lease_name=key)
    assert QueuedTask.objects.using(tasks_alias).count() == 0


@pytest.mark.parametrize(
    ("enqueue", "reason"),
    [
        (lambda: djtasks.add.enqueue(1), "missing a required argument: 'b'"),
        (lambda: djtasks.add.enqueue(1, 2, 3), "too many positional arguments"),
        (lambda: djtasks.add.enqueue(1, 2, c=3), "unexpected keyword argument 'c'"),
        # The context is passed first: with_context(context, n).
        (lambda: djtasks.with_context.enqueue(7, 8), "too many positional arguments"),
        (lambda: djtasks.with_context.enqueue(), "missing a required argument: 'n'"),
        (lambda: djtasks.unique_record.enqueue("path"), "missing a required argument: 'key'"),
        (lambda: async_to_sync(djtasks.add_async.aenqueue)(1), "missing a required argument"),
    ],
)
def test_arguments_the_function_cannot_take_are_refused_at_enqueue(
    refusal_alias: str, enqueue: Any, reason: str
) -> None:
    """Refused now, with the reason and nothing stored, rather than failing
    every attempt of the run (Django's ImmediateBackend runs it, and fails)."""
    with pytest.raises(TypeError) as refused:
        enqueue()
    assert re.match(r"task 'tests\.djtasks\.\w+' can't take these arguments: ", str(refused.value))
    assert reason in str(refused.value)
    assert QueuedTask.objects.using(refusal_alias).count() == 0
    immediate = djtasks.add.using(backend="immediate").enqueue(1)
    assert immediate.status == compat.TaskResultStatus.FAILED
    assert immediate.errors[0].exception_class is TypeError


def test_the_flags_say_what_the_backend_honours() -> None:
    backend = compat.task_backends["default"]
    assert isinstance(backend, LeaseBackend)
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task


def test_enqueue_stores_the_task_ready(tasks_alias: str) -> None:
    result = djtasks.add.using(priority=5, queue_name="other").enqueue(1, 2)
    assert result.status == compat.TaskResultStatus.READY
    assert result.enqueued_at is not None and result.started_at is None
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert (row.task_path, row.queue_name, row.priority) == ("tests.djtasks.add", "other", 5)
    assert row.args_kwargs == {"args": [1, 2], "kwargs": {}}
    fetched = djtasks.add.get_result(result.id)
    assert fetched.id == result.id and fetched.status == compat.TaskResultStatus.READY
    assert fetched.task.priority == 5 and fetched.task.queue_name == "other"


def test_enqueue_joins_the_callers_transaction(tasks_alias: str) -> None:
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=tasks_alias):
        djtasks.add.enqueue(1, 2)
        1 / 0  # noqa: B018
    assert QueuedTask.objects.using(tasks_alias).count() == 0
    assert run_ready() == 0
    with transaction.atomic(using=tasks_alias):
        result = djtasks.add.enqueue(1, 2)
    assert run_ready() == 1
    assert djtasks.add.get_result(result.id).return_value == 3


def test_get_result_of_an_unknown_id(tasks_alias: str) -> None:
    backend = compat.task_backends["default"]
    for unknown in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        with pytest.raises(compat.TaskResultDoesNotExist):
            backend.get_result(unknown)
        with pytest.raises(compat.TaskResultDoesNotExist):
            async_to_sync(backend.aget_result)(unknown)


def test_aget_result_reads_the_database(tasks_alias: str) -> None:
    result = djtasks.add.enqueue(3, 4)
    run_ready()
    fetched = async_to_sync(djtasks.add.aget_result)(result.id)
    assert fetched.return_value == 7
    async_to_sync(result.arefresh)()
    assert result.status == compat.TaskResultStatus.SUCCESSFUL


def test_ready_tasks_run_by_priority_then_enqueue_order(tasks_alias: str) -> None:
    order = [(0, "a"), (10, "b"), (-5, "c"), (10, "d"), (0, "e")]
    results = {key: djtasks.echo.using(priority=p).enqueue(key) for p, key in order}
    claimed = []
    while (claim := QueuedTask.objects.claim("w", queues=None)) is not None:
        claimed.append(claim.args[0])
        execute(claim)
    assert claimed == ["b", "d", "a", "e", "c"]
    assert all(djtasks.echo.get_result(r.id).is_finished for r in results.values())


def test_a_worker_takes_only_its_queues(tasks_alias: str) -> None:
    other = djtasks.add.using(queue_name="other").enqueue(1, 1)
    default = djtasks.add.enqueue(2, 2)
    assert run_ready(queues=["default"]) == 1
    assert djtasks.add.get_result(default.id).is_finished
    assert not djtasks.add.get_result(other.id).is_finished
    assert run_ready(queues=["other", "default"]) == 1
    assert djtasks.add.get_result(other.id).return_value == 2


def test_run_after_is_honoured_by_the_database_clock(tasks_alias: str) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    deferred = djtasks.add.using(run_after=later).enqueue(1, 1)
    past = djtasks.add.using(run_after=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
    due = past.enqueue(2, 2)
    assert run_ready() == 1
    assert djtasks.add.get_result(due.id).return_value == 4
    fetched = djtasks.add.get_result(deferred.id)
    assert fetched.status == compat.TaskResultStatus.READY
    assert fetched.task.run_after == later


def test_a_lost_workers_task_fails_with_max_attempts_1(tasks_alias: str) -> None:
    result = djtasks.add.enqueue(1, 1)
    claim = QueuedTask.objects.claim("killed-worker", queues=None)
    assert claim is not None
    assert djtasks.add.get_result(result.id).status == compat.TaskResultStatus.RUNNING
    assert QueuedTask.objects.recover() == []  # its heartbeat is fresh
    backdate(tasks_alias, claim.ttl + 1)
    # Each with its path and the worker that was lost, for the log line.
    assert QueuedTask.objects.recover() == [
        (claim.uuid, "FAILED", "tests.djtasks.add", "killed-worker")
    ]
    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class.__name__ == "LeaseLost"
    assert "killed-worker was lost" in error.traceback
    # The lost worker, woken, can write nothing: not a heartbeat, not an end.
    assert QueuedTask.objects.renew(claim) is None
    assert not QueuedTask.objects.finish(claim, status="SUCCESSFUL", return_value="2")
    assert djtasks.add.get_result(result.id).status == compat.TaskResultStatus.FAILED


def test_a_lost_workers_task_is_retried_with_a_higher_token(tasks_alias: str) -> None:
    result = djtasks.add.using(backend="retrying").enqueue(1, 1)
    first = QueuedTask.objects.claim("killed-worker", queues=None)
    assert first is not None
    backdate(tasks_alias, first.ttl + 1)
    assert QueuedTask.objects.recover() == [
        (first.uuid, "READY", "tests.djtasks.add", "killed-worker")
    ]
    second = QueuedTask.objects.claim("other-worker", queues=None)
    assert second is not None and second.uuid == first.uuid
    assert second.token > first.token and second.attempts == 2
    assert not QueuedTask.objects.finish(first, status="SUCCESSFUL", return_value="99")
    execute(second)
    result.refresh()
    assert result.return_value == 2
    assert result.worker_ids == ["killed-worker", "other-worker"]
    assert result.errors[0].exception_class.__name__ == "LeaseLost"


def test_a_finish_whose_reply_was_lost_is_found_written(tasks_alias: str) -> None:
    """``ended`` tells a retried finish that the try before it landed: only
    for the same status, owner and token."""
    djtasks.add.enqueue(1, 1)
    claim = QueuedTask.objects.claim("w", queues=None)
    assert claim is not None
    assert QueuedTask.objects.ended(claim, status="SUCCESSFUL") is None  # not yet
    written = QueuedTask.objects.finish(claim, status="SUCCESSFUL", return_value="2")
    assert isinstance(written, dt.datetime)
    assert QueuedTask.objects.ended(claim, status="SUCCESSFUL") == written
    assert QueuedTask.objects.ended(claim, status="FAILED") is None
    stranger = dataclasses.replace(claim, token=claim.token + 1)
    assert QueuedTask.objects.ended(stranger, status="SUCCESSFUL") is None


def test_cancel_before_start_fails_it_without_running(tasks_alias: str, tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    result = djtasks.record.enqueue(str(marker), "x")
    assert QueuedTask.objects.cancel(result.id) == "FAILED"
    assert run_ready() == 0
    assert not marker.exists()
    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    assert result.errors[0].exception_class.__name__ == "TaskCancelled"
    assert QueuedTask.objects.cancel(result.id) is None  # already finished


# --- an operator's retry of a failed task ------------------------------------------------


def test_a_retry_runs_a_failed_task_again_with_one_more_attempt(tasks_alias: str) -> None:
    """Its cause fixed, a failed task is ready again at once: its finish and
    value cleared, its errors kept as history, one more attempt than it had
    used, the token raised by the next claim as by any claim."""
    result = djtasks.fails_first.enqueue()
    assert run_ready() == 1
    table = QueuedTask.objects.using(tasks_alias)
    failed = table.get(uuid=result.id)
    assert (failed.status, failed.attempts, failed.max_attempts) == ("FAILED", 1, 1)
    assert failed.finished_at is not None

    assert QueuedTask.objects.retry(result.id) is True
    row = table.get(uuid=result.id)
    assert (row.status, row.attempts, row.max_attempts) == ("READY", 1, 2)
    assert (row.finished_at, row.return_value, row.run_after) == (None, None, None)
    assert row.errors == failed.errors and row.token == failed.token
    assert (row.started_at, row.worker_ids) == (failed.started_at, failed.worker_ids)
    assert QueuedTask.objects.retry(result.id) is False  # ready now: not failed
    claim = QueuedTask.objects.claim("w", queues=None)
    assert claim is not None and claim.token == failed.token + 1 and claim.attempts == 2
    assert execute(claim) == "SUCCESSFUL"
    result.refresh()
    assert (result.status, result.return_value, len(result.errors)) == ("SUCCESSFUL", 2, 1)


def test_a_retry_of_a_task_cancelled_before_it_started_makes_it_ready_now(
    tasks_alias: str, tmp_path: Any
) -> None:
    """Its attempts not used up, it keeps them; its run_after and the
    cancel are gone."""
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    marker = tmp_path / "ran"
    result = djtasks.record.using(run_after=later).enqueue(str(marker), "x")
    assert QueuedTask.objects.cancel(result.id) == "FAILED"
    assert QueuedTask.objects.retry(uuid.UUID(result.id)) is True
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert (row.status, row.run_after, row.cancel_requested) == ("READY", None, False)
    assert (row.attempts, row.max_attempts, len(row.errors)) == (0, 1, 1)
    assert run_ready() == 1 and marker.read_text().startswith("x ")


def test_a_retry_leaves_a_task_in_any_other_state_untouched(tasks_alias: str) -> None:
    from django_bgtasks.exceptions import InAtomicBlock

    done = finished(djtasks.add.enqueue(1, 1))
    running = djtasks.add.enqueue(2, 2)
    assert QueuedTask.objects.claim("w", queues=None) is not None
    ready = djtasks.add.enqueue(3, 3)
    failed = djtasks.add.enqueue(4, 4)
    QueuedTask.objects.cancel(failed.id)
    table = QueuedTask.objects.using(tasks_alias)
    before = list(table.order_by("seq").values())
    for result_id in (done.id, running.id, ready.id, "00000000-0000-4000-8000-000000000000"):
        assert QueuedTask.objects.retry(result_id) is False
    for malformed in ("not-a-uuid", "", f"{failed.id}x"):
        with pytest.raises(ValueError, match="badly formed hexadecimal UUID string"):
            QueuedTask.objects.retry(malformed)
    with transaction.atomic(using=tasks_alias), pytest.raises(InAtomicBlock):
        QueuedTask.objects.retry(failed.id)
    assert list(table.order_by("seq").values()) == before


def test_a_unique_task_is_retried_only_while_no_other_run_holds_its_key(
    tasks_alias: str, tmp_path: Any
) -> None:
    record = str(tmp_path / "record")
    first = djtasks.unique_record.enqueue(record, "a")
    assert QueuedTask.objects.cancel(first.id) == "FAILED"  # frees the key
    second = djtasks.unique_record.enqueue(record, "b")  # takes it
    table = QueuedTask.objects.using(tasks_alias)
    before = table.get(uuid=first.id)
    assert QueuedTask.objects.retry(first.id) is False
    assert table.get(uuid=first.id).status == "FAILED" and table.get(uuid=first.id) == before
    assert run_ready() == 1  # the second ran; the key is free again
    assert QueuedTask.objects.retry(first.id) is True
    keys = dict(table.values_list("uuid", "active_key"))
    assert keys == {uuid.UUID(first.id): "tests.djtasks.unique_record", uuid.UUID(second.id): None}
    # The retried task holds the key: a new enqueue joins it.
    assert djtasks.unique_record.enqueue(record, "c").id == first.id


def test_a_retry_announces_the_task_ready_on_postgresql(pg_direct_alias: str) -> None:
    """Migration 0010's trigger fires on an UPDATE of the status to READY:
    the workers' queue threads claim the retried task at once."""
    import json

    import psycopg

    from django_bgtasks.db.postgresql import notify

    result = djtasks.add.using(queue_name="other").enqueue(1, 1)
    QueuedTask.objects.cancel(result.id)
    params = connections[pg_direct_alias].get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(notify.LISTEN_QUEUE)
        assert QueuedTask.objects.retry(result.id) is True
        [notification] = list(listener.notifies(timeout=2, stop_after=1))
    assert json.loads(notification.payload) == {"queue": "other"}


def test_a_retry_that_loses_the_unique_key_to_another_writer_writes_nothing(
    pg_alias: str, tmp_path: Any
) -> None:
    """PostgreSQL: another transaction takes the key after the retry's check
    sees it free; the unique index refuses the retry, which says so."""
    import psycopg

    record = str(tmp_path / "record")
    failed = djtasks.unique_record.enqueue(record, "a")
    QueuedTask.objects.cancel(failed.id)
    other = djtasks.add.enqueue(1, 1)  # a row whose key the other writer sets
    table = QueuedTask._meta.db_table
    params = connections[pg_alias].get_connection_params()
    params.pop("cursor_factory", None)
    outcome: list[bool] = []
    with (
        psycopg.connect(**params) as writer,  # a transaction, held open
        psycopg.connect(**params, autocommit=True) as watcher,
    ):
        writer.execute(
            f"UPDATE {table} SET active_key = %s WHERE uuid = %s",
            ["tests.djtasks.unique_record", other.id],
        )
        thread = _thread(lambda: outcome.append(QueuedTask.objects.retry(failed.id)))
        _wait_for(lambda: _waiting_on_a_lock(watcher))
        writer.commit()
        thread.join(10)
    assert outcome == [False]
    assert QueuedTask.objects.using(pg_alias).get(uuid=failed.id).status == "FAILED"


def _waiting_on_a_lock(connection: Any) -> bool:
    """Whether a session waits on a lock (the retry, on the key's index entry).
    Asked in autocommit: a transaction would see one snapshot of the activity."""
    rows = connection.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"
    ).fetchone()
    return bool(rows and rows[0])


# --- system checks ------------------------------------------------------------------


def _check(options: dict[str, Any]) -> list[str]:
    backend = LeaseBackend("checked", {"QUEUES": ["default"], "OPTIONS": options})
    return [message.id or "" for message in backend.check()]


def test_checks_pass_for_good_options() -> None:
    assert _check({}) == []
    assert _check({"MAX_ATTEMPTS": 3, "TTL": 30, "IMPORT_DEADLINE": 600, "RETRY_DELAY": 5}) == []


@pytest.mark.parametrize(
    "options",
    [
        {"MAX_ATTEMPTS": 0},
        {"MAX_ATTEMPTS": "3"},
        {"TTL": -1},
        {"TTL": "soon"},
        {"RETRIES": 2},
        {"IMPORT_DEADLINE": 0},
        {"IMPORT_DEADLINE": "1h"},
        {"IMPORT_DEADLINE": True},
        {"IMPORT_DEADLINE": float("inf")},
        {"RETRY_DELAY": 0},
        {"RETRY_DELAY": "5"},
        {"RETRY_DELAY": 3601},
    ],
)
def test_checks_refuse_bad_options(options: dict[str, Any]) -> None:
    assert _check(options) == ["bgtasks.E016"]


def test_checks_refuse_an_unsupported_database(monkeypatch: pytest.MonkeyPatch) -> None:
    # The vendor is all the check reads: one the queue has no statements for.
    monkeypatch.setattr(connections["default"], "vendor", "oracle")
    assert _check({}) == ["bgtasks.E015"]


def test_checks_accept_mysql_and_mariadb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections["default"], "vendor", "mysql")
    assert _check({}) == []


# --- LeaseBackend in TASKS without the app in INSTALLED_APPS ---------------------
# Django's Tasks framework imports the backend and calls its check() whatever
# INSTALLED_APPS says; this app's ready() (and so its checks/) never runs then.

WITHOUT_THE_APP = [app for app in django_settings.INSTALLED_APPS if app != "django_bgtasks"]


def test_the_backend_without_the_app_is_a_check_error() -> None:
    backend = LeaseBackend("default", {})
    with override_settings(INSTALLED_APPS=WITHOUT_THE_APP):
        [error] = backend.check()
    assert error.id == "bgtasks.E018" and "INSTALLED_APPS" in error.msg
    assert '"django_bgtasks"' in error.hint and "migrate" in error.hint
    assert backend.check() == []  # the app registry is whole again


def test_enqueue_and_get_result_without_the_app_say_how_to_fix_it() -> None:
    backend = LeaseBackend("default", {})
    with override_settings(INSTALLED_APPS=WITHOUT_THE_APP):
        with pytest.raises(ImproperlyConfigured, match=r"INSTALLED_APPS.*bgtasks\.E018"):
            backend.enqueue(djtasks.add, (1, 2), {})
        with pytest.raises(ImproperlyConfigured, match=r"INSTALLED_APPS"):
            backend.get_result("00000000-0000-0000-0000-000000000000")


# A project whose only mistake is the missing app. Django 5.2 runs the Tasks
# backends' checks only with the backport's app installed (docs/django-tasks.md).
NO_APP_SETTINGS = """
import django

SECRET_KEY = "not-secret"
USE_TZ = True
INSTALLED_APPS = ["django_tasks"] if django.VERSION < (6,) else []
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
TASKS = {"default": {"BACKEND": "django_bgtasks.backend.LeaseBackend"}}
"""

NO_APP_SCRIPT = """
from importlib import import_module

import django

django.setup()
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_bgtasks import compat

try:
    call_command("check")
except SystemCheckError as exc:
    print(exc)


@import_module(compat.SOURCE).task
def job():
    pass


try:
    job.enqueue()
except ImproperlyConfigured as exc:
    print("ImproperlyConfigured:", exc)
"""


def test_a_project_with_the_backend_and_without_the_app(tmp_path: Path) -> None:
    """The models can't even be imported there (RuntimeError), so this runs in
    a process of its own: in this one they were imported long ago."""
    (tmp_path / "no_app_settings.py").write_text(NO_APP_SETTINGS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "DJANGO_SETTINGS_MODULE": "no_app_settings",
    }
    done = run_python(NO_APP_SCRIPT, env=env, cwd=tmp_path)
    assert "bgtasks.E018" in done.stdout and "RuntimeError" not in done.stderr
    assert "ImproperlyConfigured: TASKS['default']" in done.stdout


def _thread(target: Any, *args: Any) -> threading.Thread:
    """``target(*args)`` in a thread that closes its connections at the end, as a worker's do."""

    def run() -> None:
        try:
            target(*args)
        finally:
            for connection in connections.all(initialized_only=True):
                connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _wait_for(condition: Any, timeout: float = 10) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# --- unique tasks --------------------------------------------------------------------


def test_a_unique_task_enqueued_50_times_at_once_is_stored_once(
    tasks_alias: str, tmp_path: Any
) -> None:
    record = tmp_path / "record"
    barrier = threading.Barrier(10)
    ids: list[str] = []

    def enqueue_five() -> None:
        barrier.wait()
        for i in range(5):
            ids.append(djtasks.unique_record.enqueue(str(record), f"k{i}").id)

    threads = [_thread(enqueue_five) for _ in range(10)]
    for thread in threads:
        thread.join(60)
    assert len(ids) == 50 and len(set(ids)) == 1
    assert QueuedTask.objects.using(tasks_alias).count() == 1
    assert run_ready() == 1
    assert len(record.read_text().splitlines()) == 1
    # Finished, the key is free again: the next enqueue stores a new task.
    again = djtasks.unique_record.enqueue(str(record), "later")
    assert again.id != ids[0]
    assert djtasks.unique_record.get_result(again.id).status == compat.TaskResultStatus.READY


def test_a_unique_task_joins_the_one_running_and_other_arguments_do_not_matter(
    tasks_alias: str, tmp_path: Any
) -> None:
    first = djtasks.nightly_report.enqueue()
    claim = QueuedTask.objects.claim("w", queues=None)
    assert claim is not None
    with transaction.atomic(using=tasks_alias):  # also inside the caller's transaction
        second = djtasks.nightly_report.enqueue()
        other = djtasks.add.enqueue(1, 1)  # not unique: the transaction goes on
    assert second.id == first.id and second.status == compat.TaskResultStatus.RUNNING
    assert djtasks.add.get_result(other.id).status == compat.TaskResultStatus.READY
    execute(claim)
    assert djtasks.nightly_report.get_result(first.id).return_value == "reported"


def test_a_cancelled_unique_task_frees_its_key(tasks_alias: str, tmp_path: Any) -> None:
    first = djtasks.unique_record.enqueue(str(tmp_path / "record"), "a")
    assert djtasks.unique_record.enqueue(str(tmp_path / "record"), "b").id == first.id
    assert QueuedTask.objects.cancel(first.id) == "FAILED"  # before it started
    again = djtasks.unique_record.enqueue(str(tmp_path / "record"), "c")
    assert again.id != first.id
    keys = dict(QueuedTask.objects.using(tasks_alias).values_list("uuid", "active_key"))
    assert keys == {uuid.UUID(first.id): None, uuid.UUID(again.id): "tests.djtasks.unique_record"}


def test_unique_is_an_option_of_the_backends_task_class() -> None:
    assert djtasks.unique_record.unique and djtasks.unique_record.unique_key == (
        "tests.djtasks.unique_record"
    )
    assert djtasks.nightly_report.unique_key == "nightly-report"
    assert djtasks.add.unique_key is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_tasks_signals_are_sent(tasks_alias: str, backend: str) -> None:
    seen: list[tuple[str, str, str]] = []

    def receiver(name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((name, task_result.id, str(task_result.status)))

        return receive

    receivers = {
        "enqueued": receiver("enqueued"),
        "started": receiver("started"),
        "finished": receiver("finished"),
    }
    compat.task_enqueued.connect(receivers["enqueued"])
    compat.task_started.connect(receivers["started"])
    compat.task_finished.connect(receivers["finished"])
    try:
        result = finished(djtasks.add.using(backend=backend).enqueue(1, 1))
    finally:
        compat.task_enqueued.disconnect(receivers["enqueued"])
        compat.task_started.disconnect(receivers["started"])
        compat.task_finished.disconnect(receivers["finished"])
    assert [(name, result_id) for name, result_id, _status in seen] == [
        ("enqueued", result.id),
        ("started", result.id),
        ("finished", result.id),
    ]
    assert seen[-1][2] == "SUCCESSFUL"
