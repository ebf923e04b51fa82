"""The operator layer's reads of the background tasks
(django_bgtasks/operations/task_reads.py), on every database: which tasks a
surface lists (every row, and every registered task, also one that never
ran), one task's state, and the JSON shape of a task (its schedule and
description added for a registered one). Nothing read is written."""

from __future__ import annotations

from typing import Any

import pytest

from django_bgtasks import registered_tasks
from django_bgtasks.core.states import TaskState
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import task_reads
from tests.dbtools import rows
from tests.operations.test_writes import QUICK, SLOW, as_stored, finished_run

objects = BackgroundTask.objects


def test_task_states_are_every_row_and_every_registered_task(db_alias: str) -> None:
    finished_run("cleanup")  # a row for no registered task
    finished_run(QUICK)  # a registered task that ran
    states = task_reads.task_states()

    names = [state.name for state in states]
    assert names == sorted({"cleanup", *registered_tasks()})
    by_name = {state.name: state for state in states}
    assert as_stored(by_name["cleanup"]) == as_stored(objects.get_state("cleanup"))
    assert as_stored(by_name[QUICK]) == as_stored(objects.get_state(QUICK))
    # SLOW has no row: its state says it never ran, with its own ttl.
    assert by_name[SLOW] == TaskState.never_run(SLOW, 3.0)
    assert by_name[SLOW].status == "never run" and not by_name[SLOW].held
    assert [row["name"] for row in rows(db_alias)] == ["cleanup", QUICK]  # nothing written


def test_task_state_of_a_name_with_a_row_registered_or_neither(
    db_alias: str, settings: Any
) -> None:
    finished_run("cleanup")
    assert as_stored(task_reads.task_state("cleanup")) == as_stored(objects.get_state("cleanup"))
    assert task_reads.task_state(QUICK) == TaskState.never_run(QUICK, 30.0)
    assert task_reads.task_state("nope") is None
    assert [row["name"] for row in rows(db_alias)] == ["cleanup"]  # nothing written


def test_a_never_run_task_without_a_ttl_has_the_default_ttl(db_alias: str, settings: Any) -> None:
    from django_bgtasks import background_task

    settings.BGTASKS_TTL = 45

    @background_task(name="op-default-ttl")
    def default_ttl(running: Any) -> None:
        """No ttl of its own."""

    [state] = [s for s in task_reads.task_states() if s.name == "op-default-ttl"]
    assert (state.ttl, state.status, state.token) == (45, "never run", 0)


def test_task_json_adds_a_registered_tasks_schedule_and_description(
    db_alias: str, settings: Any
) -> None:
    import datetime as dt

    finished_run("cleanup")
    cleanup = objects.get_state("cleanup")
    assert task_reads.task_json(cleanup) == cleanup.as_json()
    quick = task_reads.task_state(QUICK)
    assert task_reads.task_json(quick) == quick.as_json() | {
        "schedule": "",
        "description": "Counts to three, reporting each step.",
    }
    settings.BGTASKS_SCHEDULES = {QUICK: dt.timedelta(minutes=1)}
    assert task_reads.task_json(quick)["schedule"] == "every 60s"
    settings.BGTASKS_SCHEDULES = {QUICK: "not a schedule"}  # bgtasks.E008
    assert task_reads.task_json(quick)["schedule"] == ""


def test_task_state_refuses_a_bad_name(db_alias: str) -> None:
    with pytest.raises(ValueError, match="'/'"):
        task_reads.task_state("a/b")
