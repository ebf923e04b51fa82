"""``lease()``, ``alease()``, the ``RunningLease`` a body gets, and its heartbeat
thread (django_bgtasks/core/runner.py), in this process. The same against real
worker processes and their faults (SIGKILL, SIGSTOP, database restarts) is in
tests/faults/test_processes.py; ``@background_task`` is in tests/background/test_functions.py."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction

import django_bgtasks
from django_bgtasks import (
    LeaseHeld,
    LeaseLost,
    TaskCancelled,
    alease,
    background_task,
    lease,
)
from django_bgtasks.choices import Outcome
from django_bgtasks.core.runner import RunningLease
from django_bgtasks.models import BackgroundTask
from tests.dbtools import rows, runs

objects = BackgroundTask.objects


def test_a_body_that_finishes_releases_as_succeeded(db_alias: str) -> None:
    with lease("cleanup", ttl=30, value={"phase": "start"}) as running:
        assert objects.get_state("cleanup").owner == running.owner
        running.update({"done": 2, "total": 2})
        running.check()

    state = objects.get_state("cleanup")
    assert (state.running, state.outcome, state.value) == (
        False,
        "succeeded",
        {"done": 2, "total": 2},
    )
    [run] = runs(db_alias)
    assert (run["outcome"], run["token"]) == ("succeeded", running.token)


def test_a_held_lease_raises_lease_held_without_running_the_body(db_alias: str) -> None:
    objects.try_claim("cleanup", "elsewhere", ttl=30)
    ran = False
    with (
        pytest.raises(LeaseHeld, match="already running by elsewhere") as info,
        lease("cleanup", ttl=30),
    ):
        ran = True
    assert not ran and info.value.holder == "elsewhere"


def test_a_crash_in_the_body_is_recorded_as_failed_and_reraised(db_alias: str) -> None:
    with pytest.raises(RuntimeError, match="disk on fire"), lease("cleanup", ttl=30) as running:
        running.update({"done": 1})
        raise RuntimeError("disk on fire")

    state = objects.get_state("cleanup")
    assert (state.running, state.outcome, state.value) == (False, "failed", {"done": 1})
    assert "RuntimeError: disk on fire" in state.error and "Traceback" in state.error
    assert runs(db_alias)[0]["outcome"] == "failed"


def test_a_silent_body_keeps_its_lease_for_three_ttls(db_alias: str) -> None:
    ttl = 0.6
    with lease("quiet", ttl=ttl) as running:
        deadline = time.monotonic() + 3 * ttl
        while time.monotonic() < deadline:
            time.sleep(0.1)
            assert objects.try_claim("quiet", "rival", ttl=ttl) is None
        running.check()
        state = objects.get_state("quiet")
        assert state.running and state.heartbeat_age < ttl
    assert objects.get_state("quiet").outcome == "succeeded"


def test_force_release_makes_the_next_update_raise_lease_lost(db_alias: str) -> None:
    with pytest.raises(LeaseLost), lease("cleanup", ttl=30) as running:
        assert objects.force_release("cleanup")
        running.update({"late": True})
    state = objects.get_state("cleanup")
    assert state.outcome == "released-by-operator" and state.value is None


def test_a_body_that_succeeds_after_losing_the_lease_is_told(db_alias: str) -> None:
    with pytest.raises(LeaseLost), lease("cleanup", ttl=30):
        objects.force_release("cleanup")
    assert objects.get_state("cleanup").outcome == "released-by-operator"


def test_cancel_raises_task_cancelled_and_records_cancelled(db_alias: str) -> None:
    with pytest.raises(TaskCancelled), lease("cleanup", ttl=0.9) as running:
        assert objects.request_cancel("cleanup")
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            running.check()  # the heartbeat thread brings the request
            time.sleep(0.05)
    state = objects.get_state("cleanup")
    assert (state.running, state.outcome) == (False, "cancelled")
    assert runs(db_alias)[0]["outcome"] == "cancelled"


def test_update_sees_a_cancel_at_once(db_alias: str) -> None:
    with pytest.raises(TaskCancelled), lease("cleanup", ttl=30) as running:
        objects.request_cancel("cleanup")
        running.update({"done": 5})
    state = objects.get_state("cleanup")
    assert (state.outcome, state.value) == ("cancelled", {"done": 5})


def test_fence_holds_off_a_takeover_until_the_transaction_ends(db_alias: str) -> None:
    """Even once the lease has expired, nobody takes it over while the holder's
    fenced transaction is open (PostgreSQL: the row lock; SQLite: the write
    lock). The takeover happens after the commit, and the holder then learns
    it lost the lease."""
    ttl = 0.5
    claimed: list[float] = []

    def rival() -> None:
        try:
            while objects.try_claim("cleanup", "rival", ttl=30) is None:
                time.sleep(0.02)
            claimed.append(time.monotonic())
        finally:
            connections[db_alias].close()

    with pytest.raises(LeaseLost), lease("cleanup", ttl=ttl) as running:
        with transaction.atomic(using=db_alias):
            running.fence()
            thread = threading.Thread(target=rival)
            thread.start()
            time.sleep(3 * ttl)  # long past the ttl: the lease is expired
            assert claimed == [], "a takeover happened inside the fenced transaction"
            committing_at = time.monotonic()
        thread.join(10)
        assert claimed and claimed[0] >= committing_at
        running.check()
    assert objects.get_state("cleanup").owner == "rival"


def test_fence_refuses_a_lost_lease(db_alias: str) -> None:
    with pytest.raises(LeaseLost), lease("cleanup", ttl=30) as running:
        objects.force_release("cleanup")
        with transaction.atomic(using=db_alias):
            running.fence()
            pytest.fail("fence() must not return for a lost lease")


def test_a_body_that_fails_after_losing_its_lease_raises_its_own_error(db_alias: str) -> None:
    """The work's exception wins over the loss, and the operator's release is
    not overwritten by a 'failed' from a holder that no longer holds it."""
    with pytest.raises(RuntimeError, match="late failure"), lease("job", ttl=30):
        assert objects.force_release("job")
        raise RuntimeError("late failure")
    assert objects.get_state("job").outcome == "released-by-operator"
    assert [run["outcome"] for run in runs(db_alias)] == ["released-by-operator"]


def test_async_twins(db_alias: str) -> None:
    async def main() -> None:
        lease_ = await objects.atry_claim("a-task", "a", {"n": 1}, ttl=30)
        assert lease_ is not None
        assert await objects.aupdate_state("a-task", "a", {"n": 2}, token=lease_.token)
        assert await objects.aheartbeat("a-task", "a", token=lease_.token)
        assert (await objects.aget_state("a-task")).value == {"n": 2}
        assert await objects.arelease("a-task", "a", token=lease_.token)
        async with django_bgtasks.alease("b-task", ttl=30) as running:
            await running.aupdate({"done": 1})
        assert (await objects.aget_state("b-task")).outcome == "succeeded"

    async def run_and_close() -> None:
        try:
            await main()
        finally:
            # The async twins run in asgiref's shared sync thread, which keeps
            # its connection open; an ASGI server closes it after each request.
            await sync_to_async(connections.close_all)()

    asyncio.run(run_and_close())


def test_alease_records_a_failing_body_and_reraises(db_alias: str) -> None:
    async def main() -> None:
        try:
            with pytest.raises(RuntimeError, match="disk on fire"):
                async with alease("job", ttl=30) as running:
                    await running.aupdate({"done": 1})
                    raise RuntimeError("disk on fire")
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(main())
    state = objects.get_state("job")
    assert (state.running, state.outcome, state.value) == (False, "failed", {"done": 1})
    assert "RuntimeError: disk on fire" in state.error


# --- logging: failures reach the tools people watch --------------------------------


def failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "django_bgtasks" and record.levelno >= logging.ERROR
    ]


def test_a_failing_body_is_logged_once_with_its_exception_and_lease(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(RuntimeError), lease("cleanup", ttl=30) as running:
        raise RuntimeError("disk on fire")

    [record] = failures(caplog)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert str(record.exc_info[1]) == "disk on fire"
    assert (record.task, record.token, record.owner) == (  # type: ignore[attr-defined]
        "cleanup",
        running.token,
        running.owner,
    )
    assert record.getMessage() == (
        f"task 'cleanup' (token {running.token}) failed on {running.owner}: "
        "RuntimeError: disk on fire"
    )


def test_success_cancel_and_loss_log_no_failure(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    with lease("a", ttl=30):
        pass
    with pytest.raises(TaskCancelled), lease("b", ttl=30) as running:
        objects.request_cancel("b")
        running.update({"n": 1})
    with pytest.raises(LeaseLost), lease("c", ttl=30):
        objects.force_release("c")
    assert failures(caplog) == []


def test_a_lost_lease_is_a_warning_with_the_lease(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(LeaseLost), lease("cleanup", ttl=30) as running:
        assert objects.force_release("cleanup")
        running.update({"late": True})
    [record] = [r for r in caplog.records if r.name == "django_bgtasks"]
    assert record.levelno == logging.WARNING and "lost" in record.getMessage()
    assert (record.task, record.token, record.owner) == (  # type: ignore[attr-defined]
        "cleanup",
        running.token,
        running.owner,
    )


def test_a_failing_async_body_is_logged_once(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        try:
            with pytest.raises(ValueError, match="bad row"):
                async with alease("job", ttl=30):
                    raise ValueError("bad row")
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(main())
    [record] = failures(caplog)
    assert record.task == "job" and isinstance(record.exc_info[1], ValueError)  # type: ignore[attr-defined,index]


# --- the result ---------------------------------------------------------------


def test_a_body_can_set_the_runs_result(db_alias: str) -> None:
    with lease("cleanup", ttl=30) as running:
        running.result = {"deleted": 4}
    with lease("other", ttl=30):
        pass
    assert objects.get_state("cleanup").result == {"deleted": 4}
    assert objects.get_state("other").result is None
    assert [run["result"] for run in runs(db_alias)] == [{"deleted": 4}, None]


# --- bad input -----------------------------------------------------------------


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), 0.05])
def test_a_bad_ttl_is_refused_before_anything_is_written(db_alias: str, ttl: float) -> None:
    with pytest.raises(ValueError, match="ttl"), lease("cleanup", ttl=ttl):
        pytest.fail("body must not run")
    with pytest.raises(ValueError, match="ttl"):
        background_task(name="t-bad-ttl", ttl=ttl)
    assert rows(db_alias) == []


def test_a_heartbeat_interval_of_half_the_ttl_is_refused(db_alias: str, settings: Any) -> None:
    settings.BGTASKS_HEARTBEAT_INTERVAL = 5
    with pytest.raises(ValueError, match="below half the ttl"), lease("cleanup", ttl=10):
        pytest.fail("body must not run")
    # Registering reads no setting (tasks modules are imported before the
    # checks run, bgtasks.E002); starting the run refuses it, before the claim.
    bad = background_task(name="t-bad-interval", ttl=10)(lambda running: None)
    with pytest.raises(ValueError, match="below half the ttl"):
        bad.start()
    assert rows(db_alias) == []
    with lease("cleanup", ttl=10.5) as running:
        assert running.interval == 5


def test_a_heartbeat_interval_that_is_not_a_number_is_refused(
    db_alias: str, settings: Any
) -> None:
    settings.BGTASKS_HEARTBEAT_INTERVAL = "10"
    with (
        pytest.raises(TypeError, match="BGTASKS_HEARTBEAT_INTERVAL must be a number"),
        lease("job", ttl=30),
    ):
        pytest.fail("body must not run")
    assert rows(db_alias) == []


# --- coalesced progress (django_bgtasks/core/progress.py) -----------------------------


class Writes:
    """Counts the value writes this thread's connection sends."""

    def __init__(self, alias: str) -> None:
        self.count = 0
        self.alias = alias

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "UPDATE" in sql.upper() and "value" in sql:
            self.count += 1
        return execute(sql, params, many, context)


def test_a_tight_loop_of_updates_is_coalesced_and_the_last_value_lands(
    db_alias: str, settings: Any
) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 0.2
    writes = Writes(db_alias)
    with lease("bar", ttl=30) as running:
        began = time.monotonic()
        with connections[db_alias].execute_wrapper(writes):
            for done in range(50_000):
                running.update({"done": done})
        elapsed = time.monotonic() - began
    # The first call, then at most one write per interval from this thread.
    assert 1 <= writes.count <= elapsed / 0.2 + 1, (writes.count, elapsed)
    state = objects.get_state("bar")
    assert (state.outcome, state.value) == ("succeeded", {"done": 49_999})  # the release


def test_the_first_update_and_flush_write_at_once_the_rest_wait(
    db_alias: str, settings: Any
) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 3600
    with lease("bar", ttl=30) as running:
        running.update({"done": 1})
        assert objects.get_state("bar").value == {"done": 1}
        running.update({"done": 2})
        assert objects.get_state("bar").value == {"done": 1}
        running.update({"done": 3}, flush=True)
        assert objects.get_state("bar").value == {"done": 3}
        running.update({"done": 4})
    assert objects.get_state("bar").value == {"done": 4}


def test_an_update_after_a_quiet_interval_writes_at_once(db_alias: str, settings: Any) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 0.3
    with lease("bar", ttl=30) as running:
        running.update({"done": 1})
        time.sleep(0.35)
        running.update({"done": 2})
        assert objects.get_state("bar").value == {"done": 2}


def test_the_heartbeat_thread_writes_a_waiting_value_when_the_body_goes_quiet(
    db_alias: str, settings: Any
) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 0.2
    with lease("bar", ttl=60) as running:  # the next heartbeat is 20 s away
        running.update({"done": 1})
        running.update({"done": 2})
        deadline = time.monotonic() + 5
        while objects.get_state("bar").value != {"done": 2}:
            assert time.monotonic() < deadline, "the waiting value was never written"
            time.sleep(0.02)


def test_a_waiting_none_is_written_by_the_release(db_alias: str, settings: Any) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 3600
    with lease("bar", ttl=30) as running:
        running.update({"done": 1})
        running.update(None)
    assert objects.get_state("bar").value is None


def test_a_failing_body_still_writes_its_last_value(db_alias: str, settings: Any) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 3600
    with pytest.raises(RuntimeError), lease("bar", ttl=30) as running:
        running.update({"done": 1})
        running.update({"done": 2})
        raise RuntimeError("disk on fire")
    state = objects.get_state("bar")
    assert (state.outcome, state.value) == ("failed", {"done": 2})


def test_an_interval_of_zero_writes_every_update(db_alias: str, settings: Any) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 0
    with lease("bar", ttl=30) as running:
        for done in range(5):
            running.update({"done": done})
            assert objects.get_state("bar").value == {"done": done}


def test_a_value_json_cant_encode_is_refused_at_the_call_even_when_it_would_wait(
    db_alias: str, settings: Any
) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 3600
    with lease("bar", ttl=30) as running:
        running.update({"done": 1})
        with pytest.raises(TypeError):
            running.update({"done": object()})
        running.update({"done": 2})
    assert objects.get_state("bar").value == {"done": 2}


def test_a_waiting_update_reports_a_cancel_the_heartbeat_brought(
    db_alias: str, settings: Any
) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 3600
    with pytest.raises(TaskCancelled), lease("bar", ttl=0.6) as running:
        running.update({"done": 1})
        objects.request_cancel("bar")
        deadline = time.monotonic() + 5
        while not running.cancel_requested:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        running.update({"done": 2})  # waits, and raises what the heartbeat learned
    state = objects.get_state("bar")
    assert (state.outcome, state.value) == ("cancelled", {"done": 2})


def test_a_waiting_update_reports_a_takeover(db_alias: str, settings: Any) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = 3600
    with pytest.raises(LeaseLost), lease("bar", ttl=0.6) as running:
        running.update({"done": 1})
        objects.force_release("bar")
        deadline = time.monotonic() + 5
        while not running.lost:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        running.update({"done": 2})
    assert objects.get_state("bar").value == {"done": 1}


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (float("nan"), ValueError), ("1", TypeError)]
)
def test_a_bad_progress_interval_is_refused_before_anything_is_written(
    db_alias: str, settings: Any, value: Any, error: type[Exception]
) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = value
    with pytest.raises(error, match="BGTASKS_PROGRESS_INTERVAL"), lease("bar", ttl=30):
        pytest.fail("body must not run")
    assert rows(db_alias) == []


def test_interrupt_ends_the_run_once_as_a_graceful_stop_would(db_alias: str) -> None:
    # A worker stopping at once calls interrupt() from its main thread while
    # the run's own thread may still finish: whichever comes first ends it.
    running = RunningLease.claim("stuck", ttl=30, value={"step": 1})
    assert running is not None
    assert running.interrupt() and running.wait(0)
    assert not running.interrupt()
    running.finish(None, result={"late": True})  # the run's own end: too late, a no-op
    (run,) = runs(db_alias, "stuck")
    assert (run["outcome"], run["token"], run["value"]) == (
        Outcome.INTERRUPTED,
        running.token,
        {"step": 1},
    )
    assert "its worker is stopping" in run["error"] and run["result"] is None
    state = objects.get_state("stuck")
    assert state is not None and not state.running and state.outcome == Outcome.INTERRUPTED

    done = RunningLease.claim("finished", ttl=30)
    assert done is not None
    done.finish(None)
    assert not done.interrupt()
    assert [run["outcome"] for run in runs(db_alias, "finished")] == [Outcome.SUCCEEDED]
