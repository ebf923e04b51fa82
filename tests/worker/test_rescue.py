"""Runs that went wrong, as a worker rescues them (worker/rescue.py), on
every database: a lost run resumed from its last value or retried afresh, an
interrupted one resumed without using an attempt, a failed one retried after
its delay until its attempts run out (never one whose result could not be
stored), and a silent holder nothing is owed for recorded as lost."""

from __future__ import annotations

import time
from typing import Any

import pytest

from django_bgtasks import RunningLease, WorkerStopping
from django_bgtasks.choices import Outcome, Trigger
from django_bgtasks.core.runner import UNSTORED_RESULT
from django_bgtasks.worker import rescue
from django_bgtasks.worker.loop import Worker
from tests.dbtools import a_worker_runs, backdate
from tests.worker.test_loop import echo, make_task, objects, runs


def test_a_lost_run_of_a_task_that_is_not_resumable_is_retried_afresh(db_alias: str) -> None:
    seen: list[tuple[Any, int, str]] = []

    def work(lease: RunningLease) -> None:
        seen.append((lease.resume_from, lease.attempt, lease.trigger))

    task = make_task("w-again", work, max_attempts=2, ttl=0.3)
    lease = objects.try_claim("w-again", "dead", {"done": 4}, ttl=0.3)
    assert lease is not None
    time.sleep(0.45)
    Worker([task], poll=0.05).run(once=True)
    assert seen == [(None, 2, Trigger.RETRY)]
    assert [(r.trigger, r.outcome) for r in runs("w-again")] == [
        (Trigger.MANUAL, Outcome.LOST),
        (Trigger.RETRY, Outcome.SUCCEEDED),
    ]


def test_a_lost_run_of_a_resumable_task_is_resumed_from_its_last_value(db_alias: str) -> None:
    seen: dict[str, Any] = {}

    def work(lease: RunningLease, total: int) -> None:
        seen.update(resume_from=lease.resume_from, attempt=lease.attempt, total=total)

    task = make_task("w-resume", work, resume=True, ttl=0.3)
    lease = objects.try_claim("w-resume", "dead", ttl=0.3, run_args={"args": [9], "kwargs": {}})
    assert lease is not None
    assert objects.update_state("w-resume", "dead", {"done": 5}, token=lease.token)
    time.sleep(0.45)  # the holder went silent past its ttl
    Worker([task], poll=0.05).run(once=True)
    assert seen == {"resume_from": {"done": 5}, "attempt": 2, "total": 9}
    assert [(r.token, r.trigger, r.outcome) for r in runs("w-resume")] == [
        (lease.token, Trigger.MANUAL, Outcome.LOST),
        (lease.token + 1, Trigger.RESUME, Outcome.SUCCEEDED),
    ]
    # The old holder stays fenced.
    assert not objects.update_state("w-resume", "dead", {"late": 1}, token=lease.token)


def test_an_interrupted_run_is_resumed_at_once_without_using_an_attempt(db_alias: str) -> None:
    calls: list[tuple[Any, int]] = []

    def work(lease: RunningLease) -> None:
        calls.append((lease.resume_from, lease.attempt))
        if len(calls) == 1:
            lease.update({"done": 2})
            raise WorkerStopping(lease.name)

    task = make_task("w-int", work, resume=True, max_attempts=1)
    a_worker_runs("w-int")
    assert objects.request_run("w-int")
    Worker([task], poll=0.02).run(once=True)
    assert calls == [(None, 1), ({"done": 2}, 1)]
    assert [(r.trigger, r.outcome) for r in runs("w-int")] == [
        (Trigger.REQUEST, Outcome.INTERRUPTED),
        (Trigger.RESUME, Outcome.SUCCEEDED),
    ]


def test_attempts_run_out_for_lost_runs_too_and_the_reason_is_recorded(db_alias: str) -> None:
    task = make_task("w-lost", echo, resume=True, max_attempts=2, ttl=0.2)
    for _ in range(2):
        state = objects.get_state("w-lost")
        if state is None:
            lease = objects.try_claim("w-lost", "dies", ttl=0.2)
        else:
            # A worker's resume claim, then the holder dies again.
            claim = objects.work.claim_resume(
                "w-lost", "dies", 0.2, expect=state.token, max_attempts=2
            )
            assert claim is not None
            lease = claim.lease
        assert lease is not None
        time.sleep(0.3)
    Worker([task], poll=0.05).run(once=True)
    state = objects.get_state("w-lost")
    assert state is not None and (state.outcome, state.attempt) == (Outcome.LOST, 2)
    assert "not resumed again" in state.error
    assert [r.outcome for r in runs("w-lost")] == [Outcome.LOST, Outcome.LOST]


def test_a_stale_lease_nothing_is_owed_for_is_recorded_lost_by_the_loop(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    lease = objects.try_claim("w-echo", "dead", ttl=0.2)
    assert lease is not None
    time.sleep(0.3)
    Worker([make_task("w-echo", echo)], poll=0.05).tick()
    state = objects.get_state("w-echo")
    assert state is not None and not state.stale and state.outcome == Outcome.LOST
    assert [r.outcome for r in runs("w-echo")] == [Outcome.LOST]
    # Said as a warning on the worker's logger, with the lease in extra.
    [record] = [r for r in caplog.records if r.name == "django_bgtasks.worker"]
    assert record.levelname == "WARNING" and "lost" in record.getMessage()
    assert (record.task, record.token) == ("w-echo", lease.token)  # type: ignore[attr-defined]


def test_a_failing_task_is_retried_until_max_attempts_then_left_failed(db_alias: str) -> None:
    def fails(lease: RunningLease) -> None:
        raise RuntimeError(f"attempt {lease.attempt}")

    task = make_task("w-fails", fails, max_attempts=3, retry_delay=0.5)
    a_worker_runs("w-fails")
    assert objects.request_run("w-fails")
    # --once does what is due now; a retry is due only after its delay
    # (0.5 s, then 1 s), so run it as cron would, now and then.
    Worker([task], poll=0.02).run(once=True)
    assert [r.attempt for r in runs("w-fails")] == [1]
    for _ in range(4):
        time.sleep(0.6)
        Worker([task], poll=0.02).run(once=True)
    assert [(r.attempt, r.trigger, r.outcome) for r in runs("w-fails")] == [
        (1, Trigger.REQUEST, Outcome.FAILED),
        (2, Trigger.RETRY, Outcome.FAILED),
        (3, Trigger.RETRY, Outcome.FAILED),
    ]
    assert "attempt 3" in runs("w-fails")[-1].error
    state = objects.get_state("w-fails")
    assert state is not None and (state.outcome, state.attempt) == (Outcome.FAILED, 3)


def test_a_result_that_cant_be_stored_fails_the_run_which_is_never_retried(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its work was done (here: one row written), so it must not run again
    for a value it can't store: failed at once, saying why, as a Django Task
    that returns one is (docs/api.md, "A run's result")."""
    from tests.testapp.models import Counter

    def writes_then_returns_a_set(lease: RunningLease) -> set[int]:
        Counter.objects.using(db_alias).create(name=f"unstorable-{lease.attempt}")
        return {1, 2}

    task = make_task("w-unstorable", writes_then_returns_a_set, max_attempts=3, retry_delay=0.0)
    a_worker_runs("w-unstorable")
    assert objects.request_run("w-unstorable")
    for _ in range(3):  # a retry would be due at once (retry_delay=0)
        Worker([task], poll=0.02).run(once=True)
    (run,) = runs("w-unstorable")
    assert (run.outcome, run.attempt, run.result) == (Outcome.FAILED, 1, None)
    note = "TypeError: result is not JSON-serialisable: Object of type set is not JSON"
    note += " serializable"
    assert run.result_note == f"not stored: {note}"
    assert run.error == f"{UNSTORED_RESULT}: {note}"
    assert list(Counter.objects.using(db_alias).values_list("name", flat=True)) == ["unstorable-1"]
    state = objects.get_state("w-unstorable")
    assert state is not None and (state.outcome, state.attempt) == (Outcome.FAILED, 1)
    [record] = [r for r in caplog.records if r.name == "django_bgtasks" and r.levelno >= 40]
    assert record.exc_info is None and note in record.getMessage()


def test_a_silent_holder_owed_nothing_is_recorded_lost_once_saying_why(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Not owed again, nor due for a retry: the run is recorded lost, with
    why (its attempts, for a task that has more than one or resumes), once:
    the record is fenced by the token the poll read."""
    for name in ("r-once", "r-spent"):
        assert objects.try_claim(name, "dead", ttl=30) is not None
        backdate(db_alias, name, 31)
    tasks = {
        "r-once": make_task("r-once", echo),  # one attempt, not resumable
        "r-spent": make_task("r-spent", echo, resume=True, max_attempts=1),
    }
    rows = {row.name: row for row in objects.work.due() if row.name in tasks}
    for name, task in tasks.items():
        assert rows[name].stale
        assert not rescue.owes_again(task, rows[name]) and not rescue.retry_due(task, rows[name])
        rescue.record_lost(task, rows[name])
        rescue.record_lost(task, rows[name])  # the same row again: nothing more
    errors = {name: objects.get_state(name).error for name in tasks}
    assert errors == {
        "r-once": "lease expired: no heartbeat within the ttl",
        "r-spent": "lost on attempt 1 of 1; not resumed again (max_attempts)",
    }
    assert [[run.outcome for run in runs(name)] for name in tasks] == [[Outcome.LOST]] * 2
    warnings = [r.getMessage() for r in caplog.records if r.name == "django_bgtasks.worker"]
    assert warnings == [f"task {name!r} (token 1) lost: {errors[name]}" for name in tasks]
