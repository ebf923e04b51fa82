"""Storing Django Tasks (``django_bgtasks/queue/enqueue.py``): ``LeaseBackend.enqueue_many()``
(issue 28), and ``enqueue()``, which stores through the same one statement.

On every engine the queue runs on: the results and the rows they stand for,
the caller's transaction, unique keys (within the batch and against a task
already ready or running), the signal, one INSERT whatever the number of
tasks, and the tasks run by the worker's code. Bad input is refused with
nothing written (on SQLite alone: no SQL runs). On PostgreSQL, the workers
are woken by one notification per queue and transaction. Real worker
processes running a batch: tests/faults/test_backend_workers.py.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_bgtasks import compat
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.execute import execute
from django_bgtasks.validation import validate_ttl
from tests import djtasks


def backend(name: str = "default") -> Any:
    return compat.task_backends[name]


def rows(alias: str) -> list[QueuedTask]:
    """The queue's rows, in enqueue order."""
    return list(QueuedTask.objects.using(alias).order_by("seq"))


def run_ready() -> int:
    """Run every ready task here, as a worker does. How many ran."""
    ran = 0
    while (claim := QueuedTask.objects.claim("test-worker", queues=None)) is not None:
        execute(claim)
        ran += 1
    return ran


class Enqueued:
    """The ``task_enqueued`` signals sent while it is open: (id, status) of each."""

    def __enter__(self) -> list[tuple[str, str]]:
        self.seen: list[tuple[str, str]] = []
        compat.task_enqueued.connect(self._receive)
        return self.seen

    def __exit__(self, *exc: object) -> None:
        compat.task_enqueued.disconnect(self._receive)

    def _receive(self, sender: Any, task_result: Any, **kwargs: Any) -> None:
        self.seen.append((task_result.id, str(task_result.status)))


# --- what is stored, and what comes back ---------------------------------------------


def test_enqueue_many_stores_each_task_ready_in_the_order_given(tasks_alias: str) -> None:
    task = djtasks.echo.using(priority=3, queue_name="other")
    items = [((i, (i, "x")), {"k": {"n": i}}) for i in range(5)]
    with Enqueued() as signalled:
        results = backend().enqueue_many(task, items)
    assert len(results) == 5 and len({result.id for result in results}) == 5
    assert all(str(uuid.UUID(result.id)) == result.id for result in results)
    assert signalled == [(result.id, "READY") for result in results]
    stored = rows(tasks_alias)
    assert [str(row.uuid) for row in stored] == [result.id for result in results]
    for i, (result, row) in enumerate(zip(results, stored, strict=True)):
        # As the database stores them: the tuple is a list.
        assert (result.args, result.kwargs) == ([i, [i, "x"]], {"k": {"n": i}})
        assert row.args_kwargs == {"args": result.args, "kwargs": result.kwargs}
        assert (row.task_path, row.queue_name, row.priority) == ("tests.djtasks.echo", "other", 3)
        assert result.task is task and result.backend == "default"
        # Each result says what get_result() reads back.
        fetched = task.get_result(result.id)
        for name in ("status", "enqueued_at", "started_at", "finished_at", "last_attempted_at"):
            assert getattr(result, name) == getattr(fetched, name), name
        assert (fetched.args, fetched.kwargs, fetched.backend) == (
            result.args,
            result.kwargs,
            "default",
        )
        assert (result.errors, result.worker_ids) == ([], [])
        assert result.status == compat.TaskResultStatus.READY and not result.is_finished
        assert isinstance(result.enqueued_at, dt.datetime) and result.enqueued_at.tzinfo


def test_a_task_stored_by_the_statement_is_a_new_row_as_the_model_makes_one(
    tasks_alias: str,
) -> None:
    """The statement writes the columns a new task starts with itself (the
    model's defaults are Python's, not the database's): the same values."""
    result = djtasks.add.enqueue(1, 2)
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    new = QueuedTask()
    given = {"seq", "uuid", "task_path", "backend", "queue_name", "args_kwargs", "enqueued_at"}
    for field in QueuedTask._meta.concrete_fields:
        if field.name not in given | {"ttl"}:
            assert getattr(row, field.name) == getattr(new, field.name), field.name
    assert row.ttl == validate_ttl(None)  # the backend's TTL: BGTASKS_TTL by default


def test_enqueue_many_of_nothing_stores_nothing_and_sends_no_sql(tasks_alias: str) -> None:
    with CaptureQueriesContext(connections[tasks_alias]) as queries:
        assert backend().enqueue_many(djtasks.add, []) == []
        assert backend().enqueue_many(djtasks.add, iter(())) == []
    assert queries.captured_queries == []


def test_aenqueue_many(tasks_alias: str) -> None:
    results = async_to_sync(backend().aenqueue_many)(djtasks.add, [((1, 2), {}), ((3, 4), {})])
    assert run_ready() == 2
    assert [djtasks.add.get_result(result.id).return_value for result in results] == [3, 7]


# --- one statement -------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 1000])
def test_enqueue_many_is_one_insert_whatever_the_number_of_tasks(
    tasks_alias: str, count: int
) -> None:
    with CaptureQueriesContext(connections[tasks_alias]) as queries:
        backend().enqueue_many(djtasks.add, [((i, i), {}) for i in range(count)])
    [insert] = queries.captured_queries
    assert insert["sql"].lstrip().startswith("INSERT INTO")
    # MySQL has no RETURNING: the INSERT, then one read of what it stored,
    # in the same query (one round trip). MariaDB has (db/mysql/enqueue.py).
    connection = connections[tasks_alias]
    mysql = connection.vendor == "mysql" and not connection.mysql_is_mariadb
    assert [step.split()[0] for step in insert["sql"].split(";")[1:]] == (
        ["SELECT"] if mysql else []
    )
    assert QueuedTask.objects.using(tasks_alias).count() == count


def test_enqueue_is_one_statement_unique_or_not_inside_atomic_or_not(
    tasks_alias: str, tmp_path: Any
) -> None:
    """No savepoint for a unique task: a key another task holds stores
    nothing and raises nothing (the caller's transaction goes on)."""
    record = str(tmp_path / "record")
    for atomic in (False, True):
        with CaptureQueriesContext(connections[tasks_alias]) as queries:
            context = transaction.atomic(using=tasks_alias) if atomic else _nothing()
            with context:
                djtasks.add.enqueue(1, 2)
                first = djtasks.unique_record.enqueue(record, "a")
        statements = [query["sql"].split()[0].upper() for query in queries.captured_queries]
        # (SQLite's atomic() logs its BEGIN and COMMIT; a savepoint would show.
        # MySQL has no RETURNING: each INSERT is followed by the read of what
        # it stored, in the same query, so in the same transaction. MariaDB
        # has.)
        assert [s for s in statements if s not in {"BEGIN", "COMMIT"}] == ["INSERT"] * 2
        QueuedTask.objects.using(tasks_alias).filter(uuid=first.id).delete()


class _nothing:
    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


# --- the caller's transaction --------------------------------------------------------


def test_enqueue_many_joins_the_callers_transaction(tasks_alias: str) -> None:
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=tasks_alias):
        backend().enqueue_many(djtasks.add, [((1, 2), {}), ((3, 4), {})])
        1 / 0  # noqa: B018
    assert QueuedTask.objects.using(tasks_alias).count() == 0
    # The same statement again on the same connection (prepared on
    # PostgreSQL by now), committed this time.
    for _ in range(3):
        with transaction.atomic(using=tasks_alias):
            results = backend().enqueue_many(djtasks.add, [((1, 2), {}), ((3, 4), {})])
    assert run_ready() == 2 * 3
    assert [djtasks.add.get_result(result.id).return_value for result in results] == [3, 7]


# --- unique keys ---------------------------------------------------------------------


def test_a_unique_tasks_batch_is_stored_once_as_enqueue_one_by_one_would(
    tasks_alias: str, tmp_path: Any
) -> None:
    record = str(tmp_path / "record")
    with Enqueued() as signalled:
        results = backend().enqueue_many(
            djtasks.unique_record, [((record, key), {}) for key in "abc"]
        )
    [row] = rows(tasks_alias)
    assert [result.id for result in results] == [str(row.uuid)] * 3
    assert signalled == [(str(row.uuid), "READY")]  # one task stored, one signal
    assert row.args_kwargs == {"args": [record, "a"], "kwargs": {}}
    assert {tuple(result.args) for result in results} == {(record, "a")}
    assert row.active_key == row.unique_key == "tests.djtasks.unique_record"
    # One by one, the same: each enqueue returns the task that holds the key.
    again = [djtasks.unique_record.enqueue(record, key) for key in "de"]
    assert [result.id for result in again] == [str(row.uuid)] * 2
    assert run_ready() == 1


def test_a_unique_tasks_batch_returns_the_task_that_holds_its_key(
    tasks_alias: str, tmp_path: Any
) -> None:
    record = str(tmp_path / "record")
    held = djtasks.unique_record.enqueue(record, "first")
    claim = QueuedTask.objects.claim("w", queues=None)  # running now
    assert claim is not None
    with Enqueued() as signalled, transaction.atomic(using=tasks_alias):
        results = backend().enqueue_many(
            djtasks.unique_record, [((record, "x"), {}), ((record, "y"), {})]
        )
        # Nothing was refused: the caller's transaction goes on.
        other = djtasks.add.enqueue(1, 1)
    assert signalled == [(other.id, "READY")]
    assert [(result.id, str(result.status)) for result in results] == [(held.id, "RUNNING")] * 2
    assert results[0].args == [record, "first"]
    assert QueuedTask.objects.using(tasks_alias).count() == 2
    execute(claim)
    # Finished, the key is free: the next batch stores its first item.
    [free, *_] = backend().enqueue_many(djtasks.unique_record, [((record, "z"), {})] * 2)
    assert free.id != held.id and free.status == compat.TaskResultStatus.READY


def test_a_named_unique_key_folds_a_batch_too(tasks_alias: str) -> None:
    results = backend().enqueue_many(djtasks.nightly_report, [((), {})] * 4)
    assert len({result.id for result in results}) == 1
    assert QueuedTask.objects.using(tasks_alias).get().active_key == "nightly-report"


# --- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "error"),
    [
        (
            [((1, 2), {}), ((1,), {}), ((1, 2), {})],
            r"^item 1: task 'tests\.djtasks\.add' can't "
            r"take these arguments: missing a required argument: 'b'$",
        ),
        ([((1, 2), {}), ((1, 2), {"c": 3})], r"^item 1: .*unexpected keyword argument 'c'"),
        (
            [((1, 2), {}), ((1, object()), {})],
            r"^item 1: the arguments of task "
            r"'tests\.djtasks\.add' must be JSON-encodable: ",
        ),
        ([((1, 2), {}), ((1, float("nan")), {})], r"^item 1: .* must be JSON-encodable"),
        ([((1, 2), {}), 5], r"^item 1 must be an \(args, kwargs\) pair, not a number$"),
        ([((1, 2), {}), (1, 2, 3)], r"^item 1 must be an \(args, kwargs\) pair, not tuple$"),
        ([[(1, 2), {}], ((1, 2), {}, None)], r"^item 1 must be an \(args, kwargs\) pair"),
        ([("12", {})], r"^item 0: args must be a list or tuple .*, not a string$"),
        ([((1, 2), {1: 2})], r"^item 0: kwargs' keys must be strings, not a number$"),
        ([((1, 2), [])], r"^item 0: kwargs must be a dict"),
        ("(1, 2)", r"^the items must be a list of \(args, kwargs\) pairs, not a string$"),
        (None, r"^the items must be a list of \(args, kwargs\) pairs, not null \(None\)$"),
    ],
)
def test_a_bad_item_is_refused_naming_it_with_nothing_written(
    refusal_alias: str, items: Any, error: str
) -> None:
    with (
        CaptureQueriesContext(connections[refusal_alias]) as queries,
        Enqueued() as signalled,
        pytest.raises(TypeError, match=error),
    ):
        backend().enqueue_many(djtasks.add, items)
    assert queries.captured_queries == [] and signalled == []
    assert QueuedTask.objects.using(refusal_alias).count() == 0


def test_enqueue_many_of_a_task_of_another_backend_is_an_invalid_task(refusal_alias: str) -> None:
    with pytest.raises(compat.InvalidTask, match=r"backend 'retrying', not on 'default'"):
        backend().enqueue_many(djtasks.add.using(backend="retrying"), [((1, 2), {})])
    with pytest.raises(compat.InvalidTask, match="nope"):
        backend().enqueue_many(djtasks.add.using(queue_name="nope"), [((1, 2), {})])
    assert QueuedTask.objects.using(refusal_alias).count() == 0


def test_enqueue_still_names_no_item(refusal_alias: str) -> None:
    with pytest.raises(TypeError, match=r"^the arguments of task 'tests\.djtasks\.echo' must be"):
        djtasks.echo.enqueue(object())
    assert QueuedTask.objects.using(refusal_alias).count() == 0


# --- run by the worker's code --------------------------------------------------------


def test_tasks_enqueued_in_bulk_run_in_priority_then_batch_order(tasks_alias: str) -> None:
    low = backend().enqueue_many(djtasks.add.using(priority=-1), [((i, 0), {}) for i in range(3)])
    high = backend().enqueue_many(djtasks.add.using(priority=5), [((i, 1), {}) for i in range(3)])
    order = []
    while (claim := QueuedTask.objects.claim("test-worker", queues=None)) is not None:
        order.append(str(claim.uuid))
        execute(claim)
    assert order == [result.id for result in high + low]
    for result in high + low:
        result.refresh()
        assert result.status == compat.TaskResultStatus.SUCCESSFUL
        assert result.return_value == sum(result.args)


def test_a_deferred_batch_waits_for_its_run_after(tasks_alias: str) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    results = backend().enqueue_many(djtasks.add.using(run_after=later), [((1, 1), {})] * 2)
    assert run_ready() == 0
    stored = djtasks.add.get_result(results[0].id)
    assert stored.task.run_after is not None
    assert abs(stored.task.run_after - later) < dt.timedelta(milliseconds=1)


# --- one wake-up (PostgreSQL) --------------------------------------------------------


def test_a_batch_wakes_the_workers_once_per_statement(pg_direct_alias: str) -> None:
    """One notification for the 500 tasks of a batch (and one for a single
    enqueue), delivered at commit, none for a rollback; the payload names
    the queue, as migration 0010's trigger's did."""
    import psycopg

    from django_bgtasks.db.postgresql import notify

    params = connections[pg_direct_alias].get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(notify.LISTEN_QUEUE)
        with transaction.atomic(using=pg_direct_alias):
            backend().enqueue_many(djtasks.add.using(queue_name="other"), [((1, 2), {})] * 500)
            assert list(listener.notifies(timeout=0.3)) == []  # not before the commit
        got = [json.loads(n.payload) for n in listener.notifies(timeout=1)]
        assert got == [{"queue": "other"}]
        with pytest.raises(ZeroDivisionError), transaction.atomic(using=pg_direct_alias):
            backend().enqueue_many(djtasks.add, [((1, 2), {})] * 5)
            1 / 0  # noqa: B018
        djtasks.add.enqueue(1, 2)
        got = [json.loads(n.payload) for n in listener.notifies(timeout=1)]
        assert got == [{"queue": "default"}]


def test_arguments_read_back_as_they_were_given(tasks_alias: str) -> None:
    """What the statement's JSON reader keeps of each task's arguments."""
    args = (2**63 + 1, 1.0, -0.5, 1.5e-7, 'é ✓ \\ "', [], {}, None, True)
    kwargs = {"nested": {"a": [1, {"b": "c"}]}, "é": ""}
    [result] = backend().enqueue_many(djtasks.echo, [(args, kwargs)])
    fetched = djtasks.echo.get_result(result.id)
    assert fetched.args == result.args == list(args)
    assert fetched.kwargs == result.kwargs == kwargs
    assert [type(value) for value in fetched.args] == [type(value) for value in args]
