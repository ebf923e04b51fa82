"""Per-task retries with backoff and timeouts, run by real ``bgtasks worker``
processes on every database (issue 29): a Django Task's ``max_attempts``
over the backend's ``MAX_ATTEMPTS`` and the spacing of its attempts (read
from the times the database recorded), and ``timeout`` for Django Tasks and
``@background_task`` runs, told at a ``check()`` or, for a run that never
checks, ended by its worker after the grace, with the run's own late end
refused. Each test ends with what the database holds: nothing left running.
The tasks are tests/djtasks.py's and tests/workerapp/tasks.py's."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from django_bgtasks.choices import Outcome
from django_bgtasks.conf import conf
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun
from tests import djtasks
from tests.dbtools import a_worker_runs
from tests.faults.harness import Workers
from tests.procs import wait_until

FAILED = "FAILED"
# The worker's grace, after a timeout, before it ends a run that did not stop.
GRACE = 0.5


@pytest.fixture
def workers(tasks_alias: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(
        tasks_alias, tmp_path, args=("--poll", "0.05", "--grace", str(GRACE)), TASKS=settings.TASKS
    )
    yield group
    group.stop_all()


def attempts(path: Path) -> list[dt.datetime]:
    """When each attempt began, by the database's clock, in attempt order."""
    lines = path.read_text().splitlines() if path.exists() else []
    found = sorted(line.split()[:2] for line in lines if line.startswith("attempt-"))
    return [dt.datetime.fromisoformat(started) for _, started in found]


def finished(result: Any, timeout: float = 30) -> Any:
    def done() -> Any:
        result.refresh()
        return result.is_finished and result

    return wait_until(f"{result.id} to finish", done, timeout)


def row_of(result: Any) -> QueuedTask:
    return QueuedTask.objects.using(conf.DATABASE).get(uuid=result.id)


def nothing_running(name: str | None = None) -> None:
    """No Django Task is RUNNING (and no run of the background task ``name``)."""
    assert not QueuedTask.objects.running().exists()
    if name is not None:
        rows = BackgroundTask.objects.using(conf.DATABASE).filter(name=name, running=True)
        assert not rows.exists()


def gaps(times: list[dt.datetime]) -> list[float]:
    return [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]


# --- retries: max_attempts and retry_delay ------------------------------------------------


def test_a_tasks_own_max_attempts_and_backoff_space_its_attempts_and_keep_every_error(
    workers: Workers, tmp_path: Path
) -> None:
    """max_attempts=4 on a backend of MAX_ATTEMPTS 1; retry_delay=0.2 doubles:
    the attempts begin 0.2, 0.4 and 0.8 s apart (+-10 %), plus a poll at
    most, by the database's clock; and max_attempts=1 on a backend of 3 is
    not retried."""
    path = tmp_path / "attempts"
    once = tmp_path / "once"
    result = djtasks.fails_with_backoff.enqueue(str(path))
    single = djtasks.fails_once_only.using(backend="retrying").enqueue(str(once))
    workers.start("--queue", "default", "--concurrency", "2")
    result = finished(result)
    single = finished(single)

    assert result.status == FAILED
    assert [error.exception_class for error in result.errors] == [RuntimeError] * 4
    assert [f"attempt {n} fails" in e.traceback for n, e in enumerate(result.errors, 1)] == [
        True
    ] * 4
    started = attempts(path)
    assert len(started) == 4
    for attempt, gap in enumerate(gaps(started), 1):
        delay = 0.2 * 2 ** (attempt - 1)
        assert 0.9 * delay <= gap < 1.1 * delay + 0.6, (attempt, gaps(started))
    row = row_of(result)
    assert (row.attempts, row.max_attempts) == (4, 4)

    assert single.status == FAILED and len(single.errors) == 1
    assert len(attempts(once)) == 1
    assert row_of(single).max_attempts == 1
    nothing_running()


def test_the_backends_retry_delay_spaces_the_attempts_of_tasks_without_their_own(
    workers: Workers, tmp_path: Path
) -> None:
    """On a backend of RETRY_DELAY 0.3 and MAX_ATTEMPTS 3: a task with no
    retry_delay begins its attempts 0.3 and 0.6 s apart (+-10 %, plus a poll
    at most); a task's own retry_delay=0.2 wins (0.2, 0.4, 0.8 s)."""
    backends, own = tmp_path / "backends", tmp_path / "own"
    spaced = djtasks.fails_every_attempt.using(backend="backoff").enqueue(str(backends))
    owned = djtasks.fails_with_backoff.using(backend="backoff").enqueue(str(own))
    workers.start("--queue", "default", "--concurrency", "2")
    for result, path, first, count in [(spaced, backends, 0.3, 3), (owned, own, 0.2, 4)]:
        result = finished(result)
        assert result.status == FAILED and len(result.errors) == count
        started = attempts(path)
        assert len(started) == count
        for attempt, gap in enumerate(gaps(started), 1):
            delay = first * 2 ** (attempt - 1)
            assert 0.9 * delay <= gap < 1.1 * delay + 0.6, (path.name, attempt, gaps(started))
    nothing_running()


# --- timeouts of Django Tasks --------------------------------------------------------------


def test_a_task_that_checks_is_told_at_its_timeout_retried_then_failed(
    workers: Workers, tmp_path: Path
) -> None:
    path = tmp_path / "attempts"
    result = djtasks.checks_past_timeout.using(backend="short").enqueue(str(path), 20)
    workers.start("--queue", "default", "--concurrency", "2")
    result = finished(result)

    assert result.status == FAILED
    assert [error.exception_class.__name__ for error in result.errors] == ["TaskTimedOut"] * 2
    assert "ran past its 0.5 s" in result.errors[-1].traceback
    started = attempts(path)
    assert len(started) == 2
    # Told at its timeout by the database's clock: not before, and soon after.
    [gap] = gaps(started)
    assert 0.5 <= gap < 0.5 + 1.0, gap
    assert 0.5 <= (result.finished_at - started[-1]).total_seconds() < 0.5 + 1.0
    nothing_running()


def test_a_task_that_never_checks_is_ended_after_the_grace_and_its_late_end_refused(
    workers: Workers, tmp_path: Path
) -> None:
    """The worker ends each attempt GRACE after its timeout: READY again, then
    FAILED; its thread sleeps on, and its return, later, writes nothing."""
    path = tmp_path / "attempts"
    result = djtasks.sleeps_past_timeout.using(backend="short").enqueue(str(path), 3)
    workers.start("--queue", "default", "--concurrency", "2")
    result = finished(result)
    assert result.status == FAILED

    def late_ends() -> bool:
        return path.exists() and path.read_text().count("late-") == 2

    wait_until("both threads to return", late_ends, timeout=20)
    result.refresh()  # after the late returns: what the worker wrote, unchanged
    assert result.status == FAILED
    assert [error.exception_class.__name__ for error in result.errors] == ["TaskTimedOut"] * 2
    row = row_of(result)
    assert row.return_value is None and row.attempts == 2
    started = attempts(path)
    [gap] = gaps(started)
    assert 0.5 + GRACE <= gap < 0.5 + GRACE + 1.5, gap
    # The first attempt was retried before its thread returned (3 s).
    assert gap < 3
    # Each late return said as such, never as an outage or a pause.
    said = workers.output()
    assert said.count("returned after its worker had ended it past its timeout") == 2, said
    assert "unreachable" not in said and "paused" not in said, said
    nothing_running()


# --- timeouts of @background_task runs -----------------------------------------------------


@pytest.fixture
def bg_workers(tasks_alias: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(tasks_alias, tmp_path, args=("--poll", "0.05", "--grace", str(GRACE)))
    yield group
    group.stop_all()


def history(name: str) -> list[TaskRun]:
    return list(TaskRun.objects.for_task(name).order_by("token"))


def test_a_background_run_that_checks_ends_timed_out(bg_workers: Workers) -> None:
    a_worker_runs("times-out-checking")
    assert BackgroundTask.objects.request_run("times-out-checking")
    bg_workers.start("--task", "times-out-checking")
    [run] = wait_until("the run's end", lambda: history("times-out-checking"), timeout=30)

    assert run.outcome == Outcome.TIMED_OUT
    assert "ran past its 0.5 s" in run.error
    assert 0.5 <= (run.finished_at - run.started_at).total_seconds() < 0.5 + 1.0
    state = BackgroundTask.objects.get_state("times-out-checking")
    assert state is not None and state.outcome == Outcome.TIMED_OUT
    nothing_running("times-out-checking")


def test_a_background_run_that_never_checks_is_ended_and_retried_elsewhere(
    bg_workers: Workers,
) -> None:
    """Two workers: the first's thread still sleeps when its run is ended,
    so the retry (max_attempts=2) is the other's; both runs end timed-out,
    and the threads' late returns record nothing."""
    a_worker_runs("times-out-silent")
    assert BackgroundTask.objects.request_run("times-out-silent")
    for _ in range(2):
        bg_workers.start("--task", "times-out-silent")
    runs = wait_until("both runs", lambda: len(h := history("times-out-silent")) == 2 and h, 30)
    wait_until("both late returns", lambda: bg_workers.output().count("late ") == 2, timeout=20)

    runs = history("times-out-silent")  # after the late returns: still these two
    assert [run.outcome for run in runs] == [Outcome.TIMED_OUT] * 2
    assert runs[0].owner != runs[1].owner
    for run in runs:
        took = (run.finished_at - run.started_at).total_seconds()
        assert 0.5 + GRACE <= took < 0.5 + GRACE + 1.5, took
    assert runs[1].started_at < runs[0].finished_at + dt.timedelta(seconds=2.5)
    state = BackgroundTask.objects.get_state("times-out-silent")
    assert state is not None and state.outcome == Outcome.TIMED_OUT and state.attempt == 2
    nothing_running("times-out-silent")
