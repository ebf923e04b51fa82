"""Direct SQL the tests use to arrange a situation (a stale heartbeat) or to
look at what was written, bypassing the code under test."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connections
from django.db.models import NOT_PROVIDED

from django_bgtasks.models import BackgroundTask, QueuedTask, QueueRollup, TaskRun, Worker
from django_bgtasks.queue import rollup
from tests import djtasks


def backdate(alias: str, name: str, seconds: float) -> None:
    """Make ``name``'s last heartbeat ``seconds`` older, as if its holder had
    gone silent that long ago, without sleeping."""
    _backdate(alias, BackgroundTask, "name", name, seconds)


def backdate_worker(alias: str, worker: str, seconds: float) -> None:
    """Make worker ``worker``'s last beat ``seconds`` older, as if it had gone
    silent that long ago, without sleeping."""
    _backdate(alias, Worker, "id", worker, seconds)


def _backdate(alias: str, model: Any, key: str, value: str, seconds: float) -> None:
    connection = connections[alias]
    table = connection.ops.quote_name(model._meta.db_table)
    if connection.vendor == "postgresql":
        sql = (
            f"UPDATE {table} SET updated_at = updated_at - make_interval(secs => %s)"
            f" WHERE {key} = %s"
        )
        params: list[Any] = [seconds, value]
    elif connection.vendor == "mysql":
        sql = (
            f"UPDATE {table} SET updated_at = updated_at"
            f" - INTERVAL ROUND(%s * 1000000) MICROSECOND WHERE {key} = %s"
        )
        params = [seconds, value]
    else:
        sql = (
            f"UPDATE {table} SET updated_at = "
            f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', updated_at, %s) WHERE {key} = %s"
        )
        params = [f"{-seconds:+} seconds", value]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        assert cursor.rowcount == 1


def rows(alias: str) -> list[dict[str, Any]]:
    return list(BackgroundTask.objects.using(alias).order_by("name").values())


def runs(alias: str, name: str | None = None) -> list[dict[str, Any]]:
    queryset = TaskRun.objects.using(alias).order_by("name", "token")
    if name is not None:
        queryset = queryset.filter(name=name)
    return list(queryset.values())


def a_worker_runs(*names: str, worker: str = "elsewhere:1:test") -> None:
    """A ``bgtasks worker`` of another process reports that it runs ``names``,
    as it does at its first poll: the cluster knows those tasks from then on,
    and ``request_run()`` accepts them in this process, which does not
    register them (the worker tests' tasks are not registered here)."""
    BackgroundTask.objects.work.beat(
        worker=worker, host="elsewhere", pid=1, tasks=list(names), concurrency=1, running=[]
    )


def app_migrations() -> list[str]:
    """The names of django_bgtasks' migrations on disk, in order."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    return sorted(name for app, name in loader.disk_migrations if app == "django_bgtasks")


def ended_a_minute_ago(alias: str) -> dt.datetime:
    """Four echo tasks that ended in the minute the rollup rolls up next
    (three succeeded in 15 ms, one failed on queue "other"), and one ready
    task waiting; rolled up, that minute counted again if a roll had
    counted it already (as a roll counts a minute once). Answers it."""
    now = BackgroundTask.objects.work.clock()
    minute = rollup.floor(now - rollup.SETTLE, 60) - dt.timedelta(minutes=1)
    batch = djtasks.echo.get_backend().enqueue_many(djtasks.echo, [((n,), {}) for n in range(4)])
    table = QueuedTask.objects.using(alias)
    ids = [result.id for result in batch]
    table.filter(uuid__in=ids).update(
        status="SUCCESSFUL", started_at=minute, finished_at=minute + dt.timedelta(seconds=0.015)
    )
    table.filter(uuid=ids[0]).update(status="FAILED", queue_name="other")
    djtasks.add.enqueue(1, 2)
    if rollup.rolled_until() is None:
        # As a worker that has been rolling up leaves it: the minutes before
        # counted, so this roll has two minutes to count, not the day a first
        # one catches up on (144 calls; tests/queue/test_rollup.py has those).
        QueueRollup.objects.using(alias).create(span=60, start=minute - dt.timedelta(minutes=2))
    while rollup.roll().behind:
        pass
    rollup.recount(minute, minute + dt.timedelta(minutes=1))
    return minute


# The columns migration 0028 (fair shares) added, which a release before it
# does not write: its enqueue, run on a table migrated back past 0028.
_SINCE_0028 = frozenset({"fairness_key", "fairness_weight"})


def enqueue_as_before_0028(alias: str, declared: Any, args: list[tuple[Any, ...]]) -> None:
    """Ready tasks of the Task ``declared``, one for each of ``args``, stored as
    a release before migration 0028 stores them: in one INSERT that names
    none of 0028's columns (the table migrated back has none), so that the
    table's insert triggers run as for that release's ``enqueue_many``."""
    import uuid

    from django_bgtasks.queue.flow import FlowOptions

    flow = FlowOptions.of(declared)
    tasks = [
        QueuedTask(
            uuid=uuid.uuid4(), task_path=declared.module_path, backend=declared.backend,
            queue_name=declared.queue_name, args_kwargs={"args": list(a), "kwargs": {}},
            concurrency=flow.concurrency,
            concurrency_key=flow.keys(declared, a, {})[0],
        )
        for a in args
    ]  # fmt: skip
    fields = [
        f for f in QueuedTask._meta.concrete_fields
        if not f.primary_key and f.name not in _SINCE_0028 and f.db_default is NOT_PROVIDED
    ]  # fmt: skip
    QueuedTask.objects.using(alias)._insert(tasks, fields=fields)
