"""worker/rollup_keeper.py: a worker of the queue keeps the dashboard's rollup from
its polls; a rollup that fails is logged and never stops its claims."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DatabaseError

from django_bgtasks.models import BackgroundTask, QueuedTask, QueueRollup
from django_bgtasks.queue import rollup
from django_bgtasks.worker.loop import Worker
from tests import djtasks


def test_a_worker_of_the_queue_rolls_up_the_minutes_passed(tasks_alias: str) -> None:
    now = BackgroundTask.objects.work.clock()
    minute = rollup.floor(now - rollup.SETTLE, 60) - dt.timedelta(minutes=1)
    ended = djtasks.echo.enqueue(1)
    QueuedTask.objects.using(tasks_alias).filter(uuid=ended.id).update(
        status="SUCCESSFUL", started_at=minute, finished_at=minute + dt.timedelta(seconds=1)
    )
    result = djtasks.add.enqueue(2, 3)
    Worker([], poll=0.1, queues=["default"]).run(once=True)
    result.refresh()
    assert result.return_value == 5
    assert rollup.rolled_until() is not None  # the worker rolled, from its polls
    # The first poll's roll: a day back, ten minutes a call, then a call a poll
    # while behind, so a run that ends at once may leave it behind; the
    # minute is there once it has caught up.
    while rollup.roll().behind:
        pass
    row = QueueRollup.objects.using(tasks_alias).get(
        span=60, start=minute, queue_name="", task_path=""
    )
    assert (row.succeeded, row.failed) == (1, 0)


def test_a_failing_rollup_is_logged_and_the_worker_goes_on(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(now: object = None) -> rollup.Rolled:
        raise DatabaseError("the rollup's table is locked")

    monkeypatch.setattr(rollup, "roll", broken)
    result = djtasks.add.enqueue(2, 3)
    Worker([], poll=0.1, queues=["default"]).run(once=True)
    result.refresh()
    assert result.return_value == 5
    assert "the dashboard's rollup failed" in caplog.text
    assert not QueueRollup.objects.using(tasks_alias).exists()
