"""The workers as the operator's surfaces show them (``bgtasks workers``, the
admin's workers table, ``GET <api>/workers/``): each worker's last report
(``BackgroundTask.objects.work.workers()``: its background runs, and for a
silent one what became of each, a takeover naming the run that took over),
with the Django Tasks whose rows it holds.

Those are read from the queue's rows, not from the worker's report: a row's
``owner`` and ``RUNNING`` status are what every other worker obeys, and the
running rows' index (by owner) reads them, at most every worker's threads. A
silent worker's are stale until a worker's poll puts them back in the queue
(or fails them), after their ttl. That recovery adds their ids to the lost
worker's row (``lost``), and each is then listed with what became of it, as
its row says now (read by id).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict

from django_bgtasks.choices import WorkerRunStatus
from django_bgtasks.core.states import HeldTask, LostTask, WorkerState
from django_bgtasks.db import read_database
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun


def workers() -> list[WorkerState]:
    """Every worker's last report, each with the Django Tasks it holds, and a
    silent one's runs taken over naming the run that took each over."""
    listed = BackgroundTask.objects.work.workers()
    held = held_tasks(BackgroundTask.objects.work.clock())
    lost = lost_tasks([result_id for worker in listed for result_id in worker.lost])
    return [
        dataclasses.replace(
            taken_over_by(worker),
            django_tasks=tuple(held.get(worker.id, ())),
            lost_tasks=tuple(
                lost.get(result_id, LostTask(result_id)) for result_id in worker.lost
            ),
        )
        for worker in listed
    ]


def taken_over_by(worker: WorkerState) -> WorkerState:
    """``worker`` with each run another holder took over naming the run that
    took it over, where the lease row names its holder now, who may be
    several runs later. A takeover records the lost run in the history (the
    worker's newest run of that name), and the run that took over has the
    next token: in the history once it ended, else the holder now. (As the
    row says when that history was pruned.)"""
    runs = []
    for run in worker.runs:
        if run.status == WorkerRunStatus.TAKEN_OVER:
            history = TaskRun.objects.for_task(run.name)
            lost = history.filter(owner=worker.id).values_list("token", flat=True).first()
            if lost is not None and run.token != lost + 1:
                taker = history.filter(token=lost + 1).values_list("owner", flat=True).first()
                if taker is not None:
                    run = dataclasses.replace(run, owner=taker, token=lost + 1)
        runs.append(run)
    return dataclasses.replace(worker, runs=tuple(runs))


def held_tasks(now: dt.datetime) -> dict[str, list[HeldTask]]:
    """The running Django Tasks by their worker, in the order they began;
    ``now``: the database's clock, which judges each heartbeat."""
    rows = (
        QueuedTask.objects.running()
        .order_by("owner")
        .values_list(
            "owner", "uuid", "task_path", "last_attempted_at", "token", "updated_at", "ttl"
        )
    )
    held: dict[str, list[HeldTask]] = defaultdict(list)
    for owner, uuid, path, started, token, beat, ttl in rows:
        stale = beat is not None and (now - beat).total_seconds() > ttl
        held[owner].append(HeldTask(str(uuid), path, started, int(token), stale))
    for tasks in held.values():
        tasks.sort(key=lambda task: (task.started_at is None, task.started_at or now))
    return held


def lost_tasks(result_ids: list[str]) -> dict[str, LostTask]:
    """The Django Tasks of ``result_ids`` (taken back from lost workers) as
    their rows say now, by id; an id whose row is gone is not in it."""
    if not result_ids:
        return {}
    rows = (
        QueuedTask.objects.using(read_database.alias())
        .filter(uuid__in=result_ids)
        .values_list("uuid", "task_path", "status", "owner")
    )
    return {
        str(uuid): LostTask(str(uuid), path, status, owner) for uuid, path, status, owner in rows
    }


__all__ = ["held_tasks", "lost_tasks", "taken_over_by", "workers"]
