"""The words the admin and the ``bgtasks`` command put a task and a worker
into (django_bgtasks/operations/display.py): durations, as live.js writes
them too; a task's status and progress, read from real rows on every
database; what became of a lost worker's runs and Django Tasks; what a bulk
action did; and what a task takes after its lease."""

from __future__ import annotations

from typing import Any

import pytest

from django_bgtasks.choices import WorkerRunStatus
from django_bgtasks.core.states import LostTask, WorkerRun
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import display
from django_bgtasks.operations.bulk import BulkResult
from tests.dbtools import backdate

objects = BackgroundTask.objects


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (None, ""),
        (-3.0, "0.0 s"),  # a clock a little behind: never negative
        (4.21, "4.2 s"),
        (42.9, "42 s"),  # whole seconds from 10 on, rounded down
        (185.0, "3 min 5 s"),
        (7532.0, "2 h 5 min"),
    ],
)
def test_a_duration_in_words(value: float | None, written: str) -> None:
    assert display.seconds(value) == written
    assert display.ago(value) == (f"{written} ago" if written else "")


def test_a_tasks_status_and_progress_in_words(db_alias: str) -> None:
    objects.try_claim("counted", "w", {"done": 9, "total": 20}, ttl=30)
    objects.try_claim("floats", "w", {"done": 3.0, "total": 4.0}, ttl=30)  # as JS writes 3.0
    objects.try_claim("almost", "w", {"progress": 0.999}, ttl=30)
    objects.try_claim("silent", "w", {"phase": "no progress"}, ttl=30)
    backdate(db_alias, "silent", 40)
    said = {
        name: (display.status_text(state), display.progress_label(state))
        for name in ("counted", "floats", "almost", "silent")
        if (state := objects.get_state(name)) is not None
    }
    assert said["counted"] == ("running", "45% (9/20)")
    assert said["floats"] == ("running", "75% (3/4)")
    assert said["almost"] == ("running", "99%")  # rounded down: 100% means done
    status, progress = said["silent"]
    assert status.startswith("stale: holder silent for 4") and status.endswith(" s")
    assert progress == ""


def test_what_became_of_a_lost_workers_runs_and_django_tasks() -> None:
    runs = [
        WorkerRun("a", WorkerRunStatus.RUNNING),
        WorkerRun("b", WorkerRunStatus.TAKEN_OVER, owner="w2", token=7),
        WorkerRun("c", WorkerRunStatus.ENDED, outcome="lost"),
        WorkerRun("d", WorkerRunStatus.ENDED),
    ]
    assert [display.worker_run(run) for run in runs] == [
        "a",
        "b (taken over by w2, token 7)",
        "c (ended: lost)",
        "d (ended: no row)",
    ]
    lost = [
        LostTask("1"),
        LostTask("2", "t.f", "READY", "w1"),
        LostTask("3", "t.f", "RUNNING", "w2"),
        LostTask("4", "t.f", "FAILED", "w2"),
    ]
    assert [display.lost_task(task) for task in lost] == [
        "? 1 (no longer in the table)",
        "t.f 2 (back in the queue)",
        "t.f 3 (running again, on w2)",
        "t.f 4 (failed on w2)",
    ]


def test_what_a_bulk_action_did_in_a_sentence() -> None:
    assert display.bulk_result(BulkResult("retry", matched=3, done=3)) == (
        "Retried 3 of the 3 Django Tasks the filter matched."
    )
    assert display.bulk_result(BulkResult("cancel", matched=5, done=2, stopping=1)) == (
        "Cancelled 2 of the 5 Django Tasks the filter matched; asked 1 running to stop at "
        "their next check(); 2 skipped (already finished)."
    )
    assert display.bulk_result(BulkResult("delete", matched=1, done=0)) == (
        "Deleted 0 of the 1 Django Tasks the filter matched; 1 skipped (running: cancel "
        "them first)."
    )


def test_what_a_task_takes_after_its_lease() -> None:
    def counts(lease: Any, numbers: list[int], *, total: int = 3) -> int:
        return total

    def anything(lease: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def unreadable(lease: Any) -> None:
        pass

    unreadable.__signature__ = "not a signature"  # type: ignore[attr-defined]
    assert display.parameters(counts) == ("(numbers, *, total=3)", True)
    assert display.parameters(anything) == ("(*args, **kwargs)", False)
    assert display.parameters(unreadable) == ("", False)
