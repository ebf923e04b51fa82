"""``@background_task`` (django_bgtasks/background/functions.py): running a
task here or starting it in a thread, its options and description, the
tasks it registers read back, and a clear error for an unknown name. (The
registry's own rules: tests/background/test_registry.py.)"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

import pytest

from django_bgtasks import (
    LeaseLost,
    RunningLease,
    UnknownTask,
    background_task,
    get_task,
    registered_tasks,
)
from django_bgtasks.models import BackgroundTask
from tests.dbtools import runs

objects = BackgroundTask.objects


def test_background_task_run_and_start(db_alias: str) -> None:
    calls: list[Any] = []
    gate = threading.Event()

    @background_task(name="t-report", ttl=30)
    def report(running: Any, days: int = 1) -> str:
        calls.append((running.name, days))
        gate.wait(10)
        running.update({"done": days, "total": days})
        return f"{days} days"

    assert get_task("t-report") is report
    gate.set()
    assert report.run(days=3) == "3 days"
    gate.clear()

    started = report.start(days=4)
    assert started is not None
    assert report.start(days=5) is None  # already running: no second copy
    assert objects.get_state("t-report").running
    gate.set()
    assert started.wait(10)
    assert started.result == "4 days" and started.exception is None
    assert calls == [("t-report", 3), ("t-report", 4)]
    assert [run["outcome"] for run in runs(db_alias)] == ["succeeded", "succeeded"]


def test_a_started_task_that_fails_is_recorded(db_alias: str) -> None:
    @background_task(name="t-fails", ttl=30)
    def fails(running: Any) -> None:
        raise ValueError("bad row 7")

    started = fails.start()
    assert started is not None and started.wait(10)
    assert isinstance(started.exception, ValueError)
    assert objects.get_state("t-fails").outcome == "failed"


def test_a_started_task_that_outlived_its_lease_reports_lease_lost(db_alias: str) -> None:
    gate = threading.Event()

    @background_task(name="t-outlived", ttl=30)
    def outlived(running: RunningLease) -> str:
        gate.wait(10)
        return "done"

    started = outlived.start()
    assert started is not None
    assert objects.force_release("t-outlived")
    gate.set()
    assert started.wait(10)
    # It ran to the end, but part of it without the lease: the caller is told.
    assert started.result == "done" and isinstance(started.exception, LeaseLost)
    assert objects.get_state("t-outlived").outcome == "released-by-operator"


# --- results and failures ------------------------------------------------------


def test_what_run_and_start_return_is_stored_as_the_runs_result(db_alias: str) -> None:
    @background_task(name="t-result", ttl=30)
    def counted(running: Any, n: int) -> dict[str, Any]:
        return {"n": n, "when": dt.date(2026, 1, 2)}

    assert counted.run(3) == {"n": 3, "when": dt.date(2026, 1, 2)}  # as returned
    assert objects.get_state("t-result").result == {"n": 3, "when": "2026-01-02"}  # as stored
    started = counted.start(4)
    assert started is not None and started.wait(10)
    assert started.result == {"n": 4, "when": dt.date(2026, 1, 2)}
    state = objects.get_state("t-result")
    assert (state.result, state.result_note) == ({"n": 4, "when": "2026-01-02"}, "")
    assert [run["result"]["n"] for run in runs(db_alias)] == [3, 4]


def test_a_result_that_cant_be_stored_fails_the_run_saying_why(db_alias: str) -> None:
    """The caller of ``.run()`` still gets what the function returned; the
    run's record says it failed, and why (the worker never retries it:
    tests/worker/test_rescue.py)."""

    @background_task(name="t-unstorable", ttl=30)
    def unstorable(running: Any) -> set[int]:
        return {1, 2}

    assert unstorable.run() == {1, 2}
    started = unstorable.start()
    assert started is not None and started.wait(10) and started.exception is None
    state = objects.get_state("t-unstorable")
    assert (state.outcome, state.result) == ("failed", None)
    assert state.result_note == (
        "not stored: TypeError: result is not JSON-serialisable: "
        "Object of type set is not JSON serializable"
    )
    assert state.error == (
        "its return value could not be stored, so the run failed and is not retried: "
        + state.result_note.removeprefix("not stored: ")
    )
    assert [run["result_note"] for run in runs(db_alias)] == [state.result_note] * 2
    assert [run["outcome"] for run in runs(db_alias)] == ["failed"] * 2


def logged_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django_bgtasks" and r.levelno >= logging.ERROR]


def test_a_task_that_raises_is_logged_once_whether_run_or_started(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    @background_task(name="t-logged", ttl=30)
    def fails(running: Any) -> None:
        raise ValueError("bad row 7")

    with pytest.raises(ValueError, match="bad row 7"):
        fails.run()
    started = fails.start()
    assert started is not None and started.wait(10)
    first, second = logged_failures(caplog)
    for record, token in [(first, 1), (second, 2)]:
        assert record.exc_info is not None and str(record.exc_info[1]) == "bad row 7"
        assert (record.task, record.token) == ("t-logged", token)  # type: ignore[attr-defined]
        assert record.owner == started.owner  # type: ignore[attr-defined]


# --- the registry ------------------------------------------------------------


def test_description_options_and_the_registry() -> None:
    @background_task(name="t-documented", ttl=30)
    def documented(running: RunningLease) -> None:
        """Rebuild the search index.

        Takes a while."""

    @background_task(name="t-undocumented")
    def undocumented(running: RunningLease) -> None:
        pass

    assert documented.description == "Rebuild the search index."
    assert undocumented.description == ""
    longer = documented.options(ttl=600)
    assert (longer.ttl, longer.name, longer.func) == (600, "t-documented", documented.func)
    assert documented.options().ttl is None  # back to BGTASKS_TTL for that run
    assert get_task("t-documented").ttl == 30  # the registry is unchanged
    with pytest.raises(ValueError, match="ttl"):
        documented.options(ttl=-1)
    tasks = registered_tasks()
    assert tasks["t-documented"] is documented and tasks["t-undocumented"] is undocumented
    assert list(tasks) == sorted(tasks)


def test_an_unknown_task_is_a_clear_error() -> None:
    with pytest.raises(UnknownTask, match="no background task is registered as 'nope'"):
        get_task("nope")


def test_start_refuses_arguments_the_function_cannot_take_before_claiming(
    refusal_alias: str,
) -> None:
    # surface-sum(lease, numbers), tests/testapp: refused as the call would
    # be, not by a run that fails in its thread.
    task = get_task("surface-sum")
    with pytest.raises(TypeError, match="can't take these arguments: missing a required argument"):
        task.start()
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        task.start([1], bogus=1)
    assert not objects.filter(name="surface-sum").exists() and runs(refusal_alias) == []
