"""The Django Tasks queues as the surfaces show them
(django_bgtasks/operations/queues.py), on every database: every queue that
has tasks or a pause, by name, whether it is paused and since when, its
tasks counted by status, and their one JSON shape. Reading writes nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import queues
from django_bgtasks.operations.queued import Counted
from tests import djtasks


def queued_rows(alias: str) -> list[dict[str, Any]]:
    return list(QueuedTask.objects.using(alias).order_by("seq").values())


def test_no_task_and_no_pause_is_no_queue(tasks_alias: str) -> None:
    assert queues.queues() == []
    assert queues.paused_queues() == {}


def test_each_queue_with_its_pause_and_its_tasks_by_status(tasks_alias: str) -> None:
    first = djtasks.add.enqueue(1, 2)
    djtasks.add.enqueue(3, 4)
    djtasks.add.enqueue(5, 6)
    failed = djtasks.add.using(queue_name="other").enqueue(7, 8)
    claim = QueuedTask.objects.claim("w", queues=["default"])
    assert claim is not None and str(claim.uuid) == first.id
    assert QueuedTask.objects.finish(claim, status="SUCCESSFUL", return_value="3")
    assert QueuedTask.objects.claim("w", queues=["default"]) is not None  # running
    assert QueuedTask.objects.cancel(failed.id) == "FAILED"  # ready: failed at once
    assert QueuedTask.objects.pause_queue("other")
    assert QueuedTask.objects.pause_queue("emptied")  # paused, with no task
    before = queued_rows(tasks_alias)

    found = queues.queues()

    assert [(q.name, q.paused) for q in found] == [
        ("default", False),
        ("emptied", True),
        ("other", True),
    ]
    assert dict(found[0].counts) == {
        "READY": Counted(1, False),
        "RUNNING": Counted(1, False),
        "SUCCESSFUL": Counted(1, False),
        "FAILED": Counted(0, False),
    }
    assert {str(count) for count in found[1].counts.values()} == {"0"}
    assert [str(found[2].counts[status]) for status in queues.STATUSES] == ["0", "0", "0", "1"]
    paused = queues.paused_queues()
    assert set(paused) == {"emptied", "other"} and found[2].paused_at == paused["other"]
    assert found[0].paused_at is None and isinstance(found[2].paused_at, dt.datetime)
    assert queued_rows(tasks_alias) == before  # nothing written


def test_a_queues_json_says_which_counts_are_lower_bounds() -> None:
    since = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    counts = {
        "READY": Counted(10_000, True),
        "RUNNING": Counted(3, False),
        "SUCCESSFUL": Counted(10_000, True),
        "FAILED": Counted(0, False),
    }
    assert queues.Queue("mail", True, since, counts).as_json() == {
        "name": "mail",
        "paused": True,
        "paused_at": "2026-01-02T03:04:05+00:00",
        "counts": {"READY": 10_000, "RUNNING": 3, "SUCCESSFUL": 10_000, "FAILED": 0},
        "capped": ["READY", "SUCCESSFUL"],
    }
    assert queues.Queue("mail", False, None, counts).as_json()["paused_at"] is None
