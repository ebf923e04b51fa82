"""The lease table, its history, the workers' rows and the queue's tables
(models.py, ``django_bgtasks.models``): what each row reads as, a run's
duration, a queued task's arguments, and what the tables themselves hold on
every engine: a run recorded once by its name and token, and the database
defaults that fill the columns a row was written without (by a trigger of
an older migration, or a worker of an older release)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import IntegrityError, connections
from django.db.models import Model

from django_bgtasks import limits
from django_bgtasks.models import (
    BackgroundTask,
    FlowSlot,
    PausedQueue,
    QueuedTask,
    QueueRollup,
    TaskRun,
    Worker,
)

START = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)


def test_each_row_reads_as_what_it_is() -> None:
    task_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert str(BackgroundTask(name="cleanup")) == "cleanup"
    assert str(TaskRun(name="cleanup", token=7)) == "cleanup #7"
    assert str(Worker(id="host:12:abcdefgh")) == "host:12:abcdefgh"
    assert str(QueuedTask(task_path="app.tasks.add", uuid=task_id)) == (
        "app.tasks.add 12345678-1234-5678-1234-567812345678"
    )
    assert str(PausedQueue(queue_name="mail")) == "mail"
    assert str(FlowSlot(kind="concurrency", flow_key="account:1", slot=2)) == (
        "concurrency account:1 #2"
    )
    # A rollup's scope: the task path, else the queue, else the whole cluster.
    rollups = [
        QueueRollup(span=60, start=START),
        QueueRollup(span=60, start=START, queue_name="mail"),
        QueueRollup(span=3600, start=START, queue_name="mail", task_path="app.tasks.add"),
    ]
    assert [str(rollup) for rollup in rollups] == [
        "* 2024-05-06 07:08 +60s",
        "mail 2024-05-06 07:08 +60s",
        "app.tasks.add 2024-05-06 07:08 +3600s",
    ]


def test_a_runs_duration_is_known_only_with_both_its_ends() -> None:
    later = START + dt.timedelta(seconds=2.5)
    assert TaskRun(started_at=START, finished_at=later).duration == 2.5
    assert TaskRun(started_at=None, finished_at=later).duration is None
    assert TaskRun(started_at=START, finished_at=None).duration is None


@pytest.mark.parametrize(
    ("stored", "arguments"),
    [
        ({"args": [1, "two"], "kwargs": {"n": 3}}, ([1, "two"], {"n": 3})),
        ({"args": [1]}, ([1], {})),
        ({"kwargs": {"n": 3}}, ([], {"n": 3})),
        ({}, ([], {})),
        (None, ([], {})),
    ],
)
def test_a_queued_tasks_arguments_are_what_it_stored(stored: object, arguments: object) -> None:
    assert QueuedTask(args_kwargs=stored).arguments() == arguments


def test_a_run_is_recorded_once_by_its_name_and_token(db_alias: str) -> None:
    runs = TaskRun.objects.using(db_alias)
    runs.create(name="job", token=1, owner="a", outcome="succeeded")
    runs.create(name="job", token=2, owner="a", outcome="failed")
    runs.create(name="other", token=1, owner="a", outcome="lost")
    with pytest.raises(IntegrityError):
        runs.create(name="job", token=1, owner="b", outcome="lost")
    # Newest first within a task, tasks by name.
    assert list(runs.values_list("name", "token")) == [("job", 2), ("job", 1), ("other", 1)]


def _insert(alias: str, model: type[Model], values: dict[str, object]) -> None:
    """A row written by SQL that names only ``values``' columns (each value
    as its field hands it to the engine), as a trigger or an older release does."""
    connection = connections[alias]
    fields = [model._meta.get_field(name) for name in values]
    table = connection.ops.quote_name(model._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    marks = ", ".join(["%s"] * len(values))
    params = [
        field.get_db_prep_save(value, connection)
        for field, value in zip(fields, values.values(), strict=True)
    ]
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", params)


def test_the_columns_added_later_have_database_defaults(db_alias: str) -> None:
    """A history row of a trigger that names only the columns of its own
    migration, a lease row written so, and a worker of a release before
    0011: the columns added since read as their defaults."""
    _insert(
        db_alias,
        TaskRun,
        {"name": "job", "token": 1, "owner": "a", "outcome": "succeeded", "error": ""},
    )
    run = TaskRun.objects.using(db_alias).get(name="job")
    assert (run.trigger, run.attempt, run.skipped, run.result_note) == ("", 0, 0, "")
    _insert(
        db_alias,
        BackgroundTask,
        {
            "name": "job",
            "running": False,
            "owner": "",
            "token": 1,
            "ttl": 30.0,
            "cancel_requested": False,
            "outcome": "",
            "error": "",
        },
    )
    task = BackgroundTask.objects.using(db_alias).get(name="job")
    assert (task.trigger, task.attempt, task.skipped, task.requested_by) == ("", 0, 0, "")
    assert (task.schedule, task.result_note, task.paused_skipped) == ("", "", 0)
    _insert(
        db_alias,
        Worker,
        {
            "id": "old",
            "host": "h",
            "pid": 1,
            "tasks": [],
            "concurrency": 1,
            "running": [],
            "started_at": START,
            "updated_at": START,
        },
    )
    assert Worker.objects.using(db_alias).get(id="old").ttl == limits.WORKER_TTL
