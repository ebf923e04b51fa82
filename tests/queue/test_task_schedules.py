"""Cron for Django Tasks (django_bgtasks/queue/task_schedules.py): a
``SCHEDULES`` entry's slot kept on its lease row, taken once and enqueued
through the backend in the same transaction, on every queue engine; what a
worker that was down does; every bad entry as a system check error with its
id. (A worker's upkeep of the slots: tests/worker/test_slots.py; three real
workers racing for them: tests/faults/test_task_schedules.py.)"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest

from django_bgtasks.backend import LeaseBackend
from django_bgtasks.background.schedules import Cron, Every
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.queue.task_schedules import (
    ScheduleError,
    TaskSchedule,
    task_schedules,
)
from django_bgtasks.worker import slots
from django_bgtasks.worker.loop import Worker
from tests import djtasks

ADD = "tests.djtasks.add"
# The same function for Django's ImmediateBackend: a task a LeaseBackend's
# SCHEDULES must refuse (bgtasks.E025). Here, not in tests/djtasks.py, which
# worker processes import without that backend.
immediate_add = djtasks.add.using(backend="immediate")


def schedule_settings(settings: Any, entries: dict[str, Any]) -> None:
    """``TASKS["default"]`` with ``entries`` as its SCHEDULES."""
    tasks = {**settings.TASKS}
    tasks["default"] = {**tasks["default"], "OPTIONS": {"SCHEDULES": entries}}
    settings.TASKS = tasks


def make_due(alias: str, entry: TaskSchedule, slot: dt.datetime) -> None:
    """Give ``entry``'s row its first slot (as a worker's poll does), then move it to ``slot``."""
    Worker([], queues=["default"]).tick()
    updated = BackgroundTask.objects.using(alias).filter(name=entry.name).update(next_run_at=slot)
    assert updated == 1


def queued(alias: str) -> list[QueuedTask]:
    return list(QueuedTask.objects.using(alias).order_by("seq"))


def test_a_worker_back_after_missed_slots_enqueues_once_for_the_oldest_and_moves_on(
    tasks_alias: str, settings: Any
) -> None:
    """As a ``@background_task``'s schedule: the slots missed while no worker
    was up are enqueued once (for the oldest), and the row moves on to the
    first slot after the database's clock; those in between are not enqueued."""
    schedule_settings(
        settings, {"adds": {"task": ADD, "schedule": dt.timedelta(minutes=1), "args": [1, 2]}}
    )
    [entry] = task_schedules()
    clock = BackgroundTask.objects.work.clock()
    oldest = Every(dt.timedelta(minutes=1)).next_after(clock) - dt.timedelta(minutes=30)
    make_due(tasks_alias, entry, oldest)

    Worker([], queues=["default"]).tick()
    Worker([], queues=["default"]).tick()
    after = BackgroundTask.objects.work.clock()

    [task] = queued(tasks_alias)
    assert task.run_after == oldest
    row = BackgroundTask.objects.using(tasks_alias).get(name=entry.name)
    # The first slot after the clock the ticks read, which a slow tick may
    # have read in the next minute.
    every = Every(dt.timedelta(minutes=1))
    assert row.next_run_at in {every.next_after(clock), every.next_after(after)}


def test_a_slot_is_not_taken_once_the_database_clock_passed_the_next_one(
    tasks_alias: str, settings: Any
) -> None:
    """A worker that stalled after its poll can't enqueue a slot late: the
    statement holds only while the database's clock is before the next slot."""
    schedule_settings(
        settings, {"adds": {"task": ADD, "schedule": dt.timedelta(minutes=1), "args": [1, 2]}}
    )
    [entry] = task_schedules()
    clock = BackgroundTask.objects.work.clock()
    slot = clock - dt.timedelta(minutes=5)
    make_due(tasks_alias, entry, slot)
    from django_bgtasks.queue.task_schedules import enqueue_slot

    assert enqueue_slot(entry, due=slot, next_slot=slot + dt.timedelta(minutes=1)) is None
    assert queued(tasks_alias) == []
    row = BackgroundTask.objects.using(tasks_alias).get(name=entry.name)
    assert row.next_run_at == slot, "untouched"


def test_a_schedule_in_a_time_zone_keeps_its_next_slot_in_that_zone(
    tasks_alias: str, settings: Any
) -> None:
    entries = {
        "adds": {
            "task": ADD,
            "schedule": "30 2 * * *",
            "timezone": "America/New_York",
            "args": [1, 2],
        }
    }
    schedule_settings(settings, entries)
    [entry] = task_schedules()
    assert entry.schedule == Cron("30 2 * * *", "America/New_York")
    Worker([], queues=["default"]).tick()
    row = BackgroundTask.objects.using(tasks_alias).get(name=entry.name)
    assert row.schedule == "30 2 * * * in America/New_York"
    assert row.next_run_at == entry.schedule.next_after(BackgroundTask.objects.work.clock())


def test_a_worker_of_background_tasks_alone_keeps_no_task_schedule(
    tasks_alias: str, settings: Any
) -> None:
    schedule_settings(
        settings, {"adds": {"task": ADD, "schedule": dt.timedelta(minutes=1), "args": [1, 2]}}
    )
    assert Worker([]).task_schedules == []
    assert Worker([], queues=["emails"]).task_schedules != [], "whatever its queues"


def test_an_enqueue_the_backend_refuses_uses_the_slot_up_and_is_logged(
    tasks_alias: str, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Arguments are checked at start-up (bgtasks.E028); should the task
    change under a running worker, the slot is used up and logged, not
    retried at every poll."""
    schedule_settings(
        settings, {"adds": {"task": ADD, "schedule": dt.timedelta(minutes=1), "args": [1, 2]}}
    )
    [entry] = task_schedules()
    broken = TaskSchedule(entry.alias, entry.key, ADD, entry.schedule, [1, 2, 3], {})
    slot = Every(dt.timedelta(minutes=1)).next_after(BackgroundTask.objects.work.clock())
    make_due(tasks_alias, entry, slot - dt.timedelta(minutes=1))
    with caplog.at_level(logging.ERROR, logger="django_bgtasks.worker"):
        assert slots.enqueue_due([broken], BackgroundTask.objects.work.due()) == 0
    assert queued(tasks_alias) == []
    assert "slot" in caplog.text and "not enqueued" in caplog.text
    row = BackgroundTask.objects.using(tasks_alias).get(name=entry.name)
    assert row.next_run_at == slot


# --- bad entries: system checks ------------------------------------------------------------


def _check(schedules: object) -> list[tuple[str, str]]:
    backend = LeaseBackend("default", {"QUEUES": ["default"], "OPTIONS": {"SCHEDULES": schedules}})
    return [(message.id or "", message.msg) for message in backend.check()]


def test_good_entries_pass_the_checks() -> None:
    assert _check({}) == []
    assert (
        _check(
            {
                "a": {"task": ADD, "schedule": dt.timedelta(seconds=1), "args": [1, 2]},
                "b": {"task": ADD, "schedule": "0 3 * * *", "kwargs": {"a": 1, "b": 2}},
                "c": {
                    "task": ADD,
                    "schedule": "0 3 * * *",
                    "args": [1],
                    "kwargs": {"b": 2},
                    "timezone": "Europe/Paris",
                },
            }
        )
        == []
    )


BAD_ENTRIES = [
    ([("x", 1)], "bgtasks.E023", "must be a dict of names"),
    ({"x": "tests.djtasks.add"}, "bgtasks.E023", "must be a dict"),
    ({"x": {"task": ADD, "schedule": "0 3 * * *", "every": 1}}, "bgtasks.E023", "'every'"),
    ({"x": {"task": ADD}}, "bgtasks.E023", "has no 'schedule'"),
    ({"x": {"schedule": "0 3 * * *"}}, "bgtasks.E023", "has no 'task'"),
    ({"a/b": {"task": ADD, "schedule": "0 3 * * *"}}, "bgtasks.E023", "must not contain '/'"),
    ({"x": {"task": "tests.djtasks.nothing", "schedule": "0 3 * * *"}}, "bgtasks.E024", "import"),
    ({"x": {"task": "no_such_module.f", "schedule": "0 3 * * *"}}, "bgtasks.E024", "import"),
    ({"x": {"task": 3, "schedule": "0 3 * * *"}}, "bgtasks.E024", "dotted path"),
    (
        {"x": {"task": "tests.djtasks.Any", "schedule": "0 3 * * *"}},
        "bgtasks.E025",
        "not a Django",
    ),
    (
        {"x": {"task": "tests.queue.test_task_schedules.immediate_add", "schedule": "0 3 * * *"}},
        "bgtasks.E025",
        "backend 'immediate'",
    ),
    ({"x": {"task": ADD, "schedule": "0 3 * *"}}, "bgtasks.E026", "five-field"),
    ({"x": {"task": ADD, "schedule": 60}}, "bgtasks.E026", "timedelta or a cron string"),
    ({"x": {"task": ADD, "schedule": dt.timedelta(0)}}, "bgtasks.E026", "above zero"),
    (
        {"x": {"task": ADD, "schedule": dt.timedelta(hours=1), "timezone": "Europe/Paris"}},
        "bgtasks.E026",
        "timezone goes with a cron",
    ),
    (
        {"x": {"task": ADD, "schedule": "0 3 * * *", "timezone": "Europe/Nowhere"}},
        "bgtasks.E027",
        "not a time zone",
    ),
    (
        {"x": {"task": ADD, "schedule": "0 3 * * *", "args": {"a": 1}}},
        "bgtasks.E028",
        "args must be a list",
    ),
    (
        {"x": {"task": ADD, "schedule": "0 3 * * *", "kwargs": [1]}},
        "bgtasks.E028",
        "kwargs must be a dict",
    ),
    ({"x": {"task": ADD, "schedule": "0 3 * * *", "args": [1, {2}]}}, "bgtasks.E028", "JSON"),
    ({"x": {"task": ADD, "schedule": "0 3 * * *", "args": [1, 2, 3]}}, "bgtasks.E028", ""),
    ({"x": {"task": ADD, "schedule": "0 3 * * *", "kwargs": {"c": 1}}}, "bgtasks.E028", ""),
]


@pytest.mark.parametrize(("entries", "check_id", "message"), BAD_ENTRIES)
def test_each_bad_entry_is_a_check_error_with_its_id_and_a_hint(
    entries: Any, check_id: str, message: str
) -> None:
    backend = LeaseBackend("default", {"QUEUES": ["default"], "OPTIONS": {"SCHEDULES": entries}})
    [error] = backend.check()
    assert error.id == check_id and message in error.msg, error.msg
    assert error.hint and "SCHEDULES" in error.msg


def test_every_bad_entry_is_reported_not_only_the_first() -> None:
    ids = [
        check_id
        for check_id, _ in _check(
            {
                "x": {"task": ADD, "schedule": "nope"},
                "y": {"task": ADD, "schedule": "0 3 * * *", "timezone": "Nowhere"},
                "z": {"task": ADD, "schedule": "0 3 * * *", "args": [1, 2]},
            }
        )
    ]
    assert ids == ["bgtasks.E026", "bgtasks.E027"]


def test_a_worker_refuses_to_start_on_a_bad_entry(settings: Any) -> None:
    schedule_settings(settings, {"x": {"task": ADD, "schedule": "0 3 * *"}})
    with pytest.raises(ScheduleError, match="five-field"):
        Worker([], queues=["default"])


def test_bgtasks_worker_refuses_to_start_on_a_bad_entry_with_nothing_written(
    tasks_alias: str, settings: Any
) -> None:
    from django.core.management import CommandError, call_command

    schedule_settings(settings, {"x": {"task": ADD, "schedule": "0 3 * * *"}})
    with pytest.raises(CommandError, match=r"SCHEDULES'\]\['x'\]: .*missing a required argument"):
        call_command("bgtasks", "worker", "--queue", "default", "--once")
    assert not BackgroundTask.objects.using(tasks_alias).exists()
