"""What a ``TaskState`` derives from its row (django_bgtasks/core/states.py):
the status, the progress and its JSON, read back from each database."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from django_bgtasks.core.states import TaskState
from django_bgtasks.models import BackgroundTask
from tests.dbtools import a_worker_runs, backdate

objects = BackgroundTask.objects


def state_with(value: Any = None, **fields: Any) -> TaskState:
    base: dict[str, Any] = {
        "name": "t",
        "value": value,
        "running": False,
        "owner": "a",
        "token": 1,
        "ttl": 30.0,
        "started_at": None,
        "finished_at": None,
        "updated_at": None,
        "cancel_requested": False,
        "outcome": "",
        "error": "",
        "stale": False,
        "heartbeat_age": None,
    }
    return TaskState(**{**base, **fields})


def test_status_reads_the_four_states_from_the_database(db_alias: str) -> None:
    lease_ = objects.try_claim("job", "a", ttl=30)
    assert objects.get_state("job").status == "running"
    objects.request_cancel("job")
    assert objects.get_state("job").status == "cancel requested"
    backdate(db_alias, "job", 31)
    assert objects.get_state("job").status == "stale"
    objects.expire_stale()
    assert objects.get_state("job").status == "idle"
    assert not objects.heartbeat("job", "a", token=lease_.token)


@pytest.mark.parametrize(
    ("value", "progress"),
    [
        ({"done": 3, "total": 4}, 0.75),
        ({"done": 9, "total": 4}, 1.0),  # clamped
        ({"done": -1, "total": 4}, 0.0),
        ({"done": 1, "total": 0}, None),  # no division by zero
        ({"done": 1, "total": 0, "progress": 0.5}, 0.5),  # falls back
        ({"progress": 0.25}, 0.25),
        ({"progress": 7}, 1.0),
        ({"progress": True}, None),  # a bool is not a number here
        ({"done": "3", "total": "4"}, None),
        ({"phase": "scanning"}, None),
        ([0.5], None),
        (None, None),
    ],
)
def test_progress_comes_from_done_and_total_or_progress(value: Any, progress: Any) -> None:
    assert state_with(value).progress == progress


def test_a_task_that_never_ran(db_alias: str) -> None:
    state = TaskState.never_run("job", 30.0)
    assert (state.status, state.token, state.running, state.held, state.owner) == (
        "never run",
        0,
        False,
        False,
        "",
    )
    assert (state.duration, state.progress, state.result, state.result_note) == (
        None,
        None,
        None,
        "",
    )
    data = json.loads(json.dumps(state.as_json()))
    assert data["status"] == "never run" and data["started_at"] is None
    # A row nothing ever claimed (a request filed, or a worker's first slot)
    # reads the same way until its first run, unless a request is pending.
    a_worker_runs("job")
    assert objects.request_run("job")
    assert objects.get_state("job").status == "requested"
    assert objects.work.ensure_schedule(
        "sched", schedule="every 60s", next_slot=dt.datetime(2030, 1, 1, tzinfo=dt.UTC), ttl=30
    )
    assert objects.get_state("sched").status == "never run"
    assert state_with(started_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC)).status == "idle"


def test_as_json_is_the_state_with_iso_times_status_and_progress(db_alias: str) -> None:
    objects.try_claim("job", "a", {"done": 1, "total": 2}, ttl=30)
    state = objects.get_state("job")
    data = json.loads(json.dumps(state.as_json()))  # JSON-ready as it is
    assert data["status"] == "running" and data["progress"] == 0.5
    assert data["value"] == {"done": 1, "total": 2}
    assert dt.datetime.fromisoformat(data["started_at"]) == state.started_at
    assert dt.datetime.fromisoformat(data["updated_at"]) == state.updated_at
    assert data["finished_at"] is None
    assert set(data) == set(TaskState.__dataclass_fields__) | {"status", "progress"}
    assert (data["result"], data["result_note"]) == (None, "")
