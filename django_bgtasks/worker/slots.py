"""A worker's schedule upkeep: each scheduled task's slot on its lease row.

A schedule only says which slot comes after an instant of the database's
clock (:mod:`django_bgtasks.background.schedules`); here the workers keep the
row's next slot in step with the tasks they run, claim a slot that is due,
and skip one that comes while the task is still running.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Protocol

from django_bgtasks.background.functions import BackgroundTaskFunction
from django_bgtasks.background.schedules import Cron, Every
from django_bgtasks.core.states import DueRow, WorkClaim
from django_bgtasks.models import BackgroundTask
from django_bgtasks.queue.task_schedules import TaskSchedule, enqueue_slot


class Scheduled(Protocol):
    """What the upkeep reads of a scheduled thing: a ``@background_task``, or
    a Django Task schedule (:class:`~django_bgtasks.queue.task_schedules.TaskSchedule`)."""

    @property
    def name(self) -> str: ...

    @property
    def effective_schedule(self) -> Every | Cron | None: ...

    @property
    def effective_ttl(self) -> float: ...


def ensure_schedules(tasks: Iterable[Scheduled], rows: list[DueRow]) -> None:
    """Give each scheduled task of ``tasks`` its first slot, and follow
    schedule changes: a changed schedule moves the slot earlier only (or
    removes it), so workers that disagree for a while (a rolling deploy)
    never keep postponing it. The statement repeats the rule, for races."""
    by_name = {row.name: row for row in rows}
    now: dt.datetime | None = rows[0].db_now if rows else None
    for task in tasks:
        row, schedule = by_name.get(task.name), task.effective_schedule
        text = schedule.text if schedule is not None else ""
        if row is not None and row.schedule == text and row.next_run_at is not None:
            continue
        if schedule is None and (row is None or not row.schedule):
            continue
        if now is None:
            now = BackgroundTask.objects.work.clock()
        next_slot = schedule.next_after(now) if schedule is not None else None
        if _comes_first(row, next_slot):
            continue  # the slot another schedule set comes first: keep it
        BackgroundTask.objects.work.ensure_schedule(
            task.name, schedule=text, next_slot=next_slot, ttl=task.effective_ttl
        )


def slot_due(task: BackgroundTaskFunction[..., Any], row: DueRow) -> bool:
    """The row's slot is due, and the task has a schedule to move it on by."""
    return bool(row.slot_due and row.next_run_at and task.effective_schedule is not None)


def claim_slot(
    task: BackgroundTaskFunction[..., Any], row: DueRow, owner: str
) -> WorkClaim | None:
    """Claim the due slot (:func:`slot_due`), moving the row on to the next one."""
    schedule = task.effective_schedule
    assert row.next_run_at is not None and schedule is not None
    return BackgroundTask.objects.work.claim_scheduled(
        row.name,
        owner,
        task.effective_ttl,
        due=row.next_run_at,
        next_slot=schedule.next_after(row.db_now),
        schedule=schedule.text,
    )


def skip_slot(task: BackgroundTaskFunction[..., Any], row: DueRow) -> None:
    """A slot that comes while the task is held by a live holder, or while it
    is paused, is skipped, not queued up behind the run or the pause; it is
    counted on the run, or on a paused row for its next run's ``skipped``
    (so the history has it). A compare-and-set on the slot the poll saw: one
    worker counts it."""
    if (row.running or row.paused) and slot_due(task, row):
        schedule = task.effective_schedule
        assert row.next_run_at is not None and schedule is not None
        BackgroundTask.objects.work.skip_slot(
            row.name,
            due=row.next_run_at,
            next_slot=schedule.next_after(row.db_now),
            schedule=schedule.text,
        )


def enqueue_due(schedules: Iterable[TaskSchedule], rows: list[DueRow]) -> int:
    """Take each Django Task schedule's due slot and enqueue its task, in one
    transaction each (:func:`~django_bgtasks.queue.task_schedules.enqueue_slot`);
    how many this worker enqueued. A slot missed while no worker was up is
    taken once, as a ``@background_task``'s is: the oldest missed slot, moving
    the row on to the first slot after the database's clock."""
    by_name = {row.name: row for row in rows}
    enqueued = 0
    for entry in schedules:
        row = by_name.get(entry.name)
        if row is None or not row.slot_due or row.next_run_at is None:
            continue
        next_slot = entry.schedule.next_after(row.db_now)
        if enqueue_slot(entry, due=row.next_run_at, next_slot=next_slot) is not None:
            enqueued += 1
    return enqueued


def _comes_first(row: DueRow | None, next_slot: dt.datetime | None) -> bool:
    """The row's slot is no later than ``next_slot``, so a changed schedule keeps it."""
    if row is None or row.next_run_at is None or next_slot is None:
        return False
    return row.next_run_at <= next_slot
