"""A worker's schedule upkeep (worker/slots.py), on every database: a
scheduled task's first slot, a changed schedule that moves it earlier only,
a due slot claimed once and the row moved on past the missed ones, a slot
that comes while the task runs skipped and counted, and a Django Task
schedule's due slot enqueued once, whichever worker polled."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django_bgtasks.background.schedules import Every
from django_bgtasks.choices import Outcome, Trigger
from django_bgtasks.models import BackgroundTask
from django_bgtasks.queue.task_schedules import task_schedules
from django_bgtasks.worker import slots
from django_bgtasks.worker.loop import Worker
from tests import djtasks
from tests.queue.test_task_schedules import ADD, make_due, queued, schedule_settings
from tests.worker.test_loop import echo, make_task, objects, runs


def test_a_due_slot_runs_once_and_moves_to_the_next(db_alias: str) -> None:
    task = make_task("w-sched", echo, schedule=dt.timedelta(hours=1))
    worker = Worker([task], poll=0.05)
    assert worker.tick() == 0  # the first slot is set, an hour ahead at most
    state = objects.get_state("w-sched")
    assert state is not None and state.next_run_at is not None
    assert state.next_run_at.minute == 0 and state.next_run_at.second == 0
    # Make the slot due, as if the hour had passed.
    slot = state.next_run_at - dt.timedelta(hours=2)
    BackgroundTask.objects.filter(name="w-sched").update(next_run_at=slot)
    worker.run(once=True)
    (run,) = runs("w-sched")
    assert (run.trigger, run.outcome, run.scheduled_for) == (
        Trigger.SCHEDULE,
        Outcome.SUCCEEDED,
        slot,
    )
    # Missed slots are not run one by one: the next slot is in the future.
    state = objects.get_state("w-sched")
    assert state is not None and state.next_run_at is not None
    assert state.next_run_at > slot + dt.timedelta(hours=1)
    worker.run(once=True)
    assert len(runs("w-sched")) == 1


def test_a_changed_schedule_moves_the_slot_earlier_only_and_a_removed_one_clears_it(
    db_alias: str,
) -> None:
    """Workers that disagree about a schedule for a while (a rolling deploy)
    must not keep postponing each other's slot: a change moves it earlier only;
    the claim of the slot then writes its worker's next one."""

    def slot() -> dt.datetime:
        state = objects.get_state("w-sched")
        assert state is not None and state.next_run_at is not None
        return state.next_run_at

    # A daily slot twelve hours from now: never the next five-minute one
    # (a fixed 03:00 was, when the test ran between 02:55 and 03:00 UTC).
    hour = (dt.datetime.now(dt.UTC).hour + 12) % 24
    daily = f"0 {hour} * * *"
    Worker([make_task("w-sched", echo, schedule=daily)], poll=0.05).tick()
    assert (slot().hour, slot().minute) == (hour, 0)  # TIME_ZONE is UTC
    five = Worker([make_task("w-sched", echo, schedule="*/5 * * * *")], poll=0.05)
    five.tick()
    earlier = slot()
    assert earlier.minute % 5 == 0 and earlier.hour != hour
    row = BackgroundTask.objects.get(name="w-sched")
    assert row.schedule == "*/5 * * * *"
    # The old schedule's next slot (hours away) is later: the earlier one
    # stays, however often the old worker polls.
    old = Worker([make_task("w-sched", echo, schedule=daily)], poll=0.05)
    for _ in range(3):
        old.tick()
        five.tick()
    assert slot() == earlier
    # When the slot is claimed, the claimer's schedule writes the next one.
    BackgroundTask.objects.filter(name="w-sched").update(
        next_run_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    )
    old.run(once=True)
    row = BackgroundTask.objects.get(name="w-sched")
    assert row.schedule == daily and row.next_run_at is not None
    assert (row.next_run_at.hour, row.next_run_at.minute) == (hour, 0)
    Worker([make_task("w-sched", echo)], poll=0.05).tick()
    state = objects.get_state("w-sched")
    assert state is not None and state.next_run_at is None


def test_a_slot_that_comes_while_the_task_runs_is_skipped_and_counted(db_alias: str) -> None:
    task = make_task("w-sched", echo, schedule=dt.timedelta(hours=1))
    worker = Worker([task], poll=0.05)
    worker.tick()
    lease = objects.try_claim("w-sched", "someone", ttl=30)
    assert lease is not None
    BackgroundTask.objects.filter(name="w-sched").update(
        next_run_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    )
    assert worker.tick() == 0
    row = BackgroundTask.objects.get(name="w-sched")
    assert row.skipped == 1 and row.next_run_at is not None and row.next_run_at.year > 2000
    assert objects.release("w-sched", "someone", token=lease.token)
    (run,) = runs("w-sched")
    assert run.skipped == 1


def test_a_due_slot_enqueues_its_task_once_through_the_backend(
    tasks_alias: str, settings: Any
) -> None:
    schedule_settings(
        settings,
        {"adds": {"task": ADD, "schedule": dt.timedelta(minutes=1), "kwargs": {"a": 2, "b": 3}}},
    )
    [entry] = task_schedules()
    assert entry.name == "tasks:default:adds"
    clock = BackgroundTask.objects.work.clock()
    slot = Every(dt.timedelta(minutes=1)).next_after(clock) - dt.timedelta(minutes=1)
    make_due(tasks_alias, entry, slot)
    rows = BackgroundTask.objects.work.due()

    assert slots.enqueue_due([entry], rows) == 1
    # Another worker that polled at the same time saw the same slot: it takes nothing.
    assert slots.enqueue_due([entry], rows) == 0

    [task] = queued(tasks_alias)
    assert (task.task_path, task.args_kwargs) == (ADD, {"args": [], "kwargs": {"a": 2, "b": 3}})
    assert task.queue_name == "default" and task.backend == "default"
    assert task.run_after == slot, "the result records the slot that made it"
    result = djtasks.add.get_result(str(task.uuid))
    assert result.task.run_after == slot
    row = BackgroundTask.objects.using(tasks_alias).get(name=entry.name)
    assert row.scheduled_for == slot and row.next_run_at == slot + dt.timedelta(minutes=1)
    assert not row.running and row.schedule == "every 60s"
    # Its state says it is at work, with the slot of the task it enqueued
    # (it had read "never run", token 0, as a row that never runs does).
    state = BackgroundTask.objects.get_state(entry.name)
    assert state is not None and (state.status, state.scheduled_for) == ("idle", slot)
    assert state.as_json()["scheduled_for"] == slot.isoformat()
