"""Cron for Django Tasks with real ``bgtasks worker`` processes, on every
queue engine: three workers racing for a schedule of one second enqueue
exactly one task per slot, counted from the database. (The rule in this
process, a worker that was down, and the checks: tests/queue/test_task_schedules.py.)"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from django_bgtasks.models import BackgroundTask, QueuedTask
from tests.faults.harness import Workers
from tests.procs import wait_until

ADD = "tests.djtasks.add"
SECOND = dt.timedelta(seconds=1)


@pytest.fixture
def workers(tasks_alias: str, tmp_path: Path) -> Iterator[Workers]:
    tasks: dict[str, Any] = {**settings.TASKS}
    schedules = {"tick": {"task": ADD, "schedule": SECOND, "args": [1, 2]}}
    tasks["default"] = {**tasks["default"], "OPTIONS": {"SCHEDULES": schedules}}
    group = Workers(tasks_alias, tmp_path, args=("--poll", "0.05"), TASKS=tasks)
    yield group
    group.stop_all()


def slots(alias: str) -> list[dt.datetime]:
    """The slot of each task the schedule enqueued (``run_after``), from the database."""
    rows = QueuedTask.objects.using(alias).filter(task_path=ADD)
    return [run_after for run_after in rows.values_list("run_after", flat=True) if run_after]


def test_three_workers_enqueue_exactly_one_task_per_slot(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    for _ in range(3):
        workers.start("--queue", "default", "--verbosity", "2")
    wait_until("a first slot", lambda: slots(tasks_alias), timeout=60)
    started = time.monotonic()
    time.sleep(6)
    elapsed = time.monotonic() - started
    workers.stop_all()

    found = slots(tasks_alias)
    per_slot = Counter(found)
    assert per_slot and set(per_slot.values()) == {1}, per_slot.most_common(3)
    assert all(slot.microsecond == 0 for slot in found), "slots on the one-second grid"
    # A slot that no worker saw within its second would be taken late, once,
    # and the one after it skipped: so a loaded machine may lose a few, never add.
    assert len(found) >= elapsed - 2, sorted(found)
    row = BackgroundTask.objects.using(tasks_alias).get(name="tasks:default:tick")
    assert row.scheduled_for == max(found) and not row.running
    # The race was real: more than one worker took slots.
    takers = {
        path.name
        for path in tmp_path.glob("worker-*.log")
        if re.search(r"schedule tasks:default:tick: slot \S+ enqueued", path.read_text())
    }
    assert len(takers) >= 2, workers.output()
