"""The background-task runs a worker started (worker/runs.py): the runs it
holds, by name, reaped once their threads end (each told to the worker's
hooks and logged at INFO, as a worker logs each run's start and end), and
the warning for a run still going past the grace period."""

from __future__ import annotations

import re
import threading
import time

import pytest
from django.db import connections

from django_bgtasks import RunningLease
from django_bgtasks.worker.loop import Worker
from django_bgtasks.worker.runs import Runs
from tests.dbtools import a_worker_runs
from tests.worker.test_loop import echo, make_task, objects, runs


def test_a_worker_logs_each_run_start_and_end_at_info(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="django_bgtasks")
    a_worker_runs("w-echo")
    assert objects.request_run("w-echo", kwargs={"n": 5})
    worker = Worker([make_task("w-echo", sleeps_then_echoes)], poll=0.02)
    worker.run(once=True)
    (run,) = runs("w-echo")
    records = [r for r in caplog.records if r.name == "django_bgtasks.worker"]
    lines = [r.getMessage() for r in records]
    assert lines[0] == f"worker {worker.id}: 1 task(s) (w-echo), queue(s) (none), " + (
        "concurrency 4, poll 0.02 s"
    )
    assert f"task 'w-echo' started (token {run.token}, request, attempt 1)" in lines
    # The end says how the run ended and how long it took (its history's duration,
    # by this process's clock: from the claim to the end of the work).
    [end] = [r for r in records if " ended: " in r.getMessage()]
    said = re.fullmatch(
        rf"task 'w-echo' \(token {run.token}, attempt 1\) ended: succeeded after (\S+) s",
        end.getMessage(),
    )
    assert said is not None and 0.2 <= float(said[1]) <= run.duration + 0.5
    # The same facts in the records' extra, for structured logging.
    [start] = [r for r in records if " started " in r.getMessage()]
    fields = ("task", "token", "owner", "attempt")
    expected = ["w-echo", run.token, worker.id, 1]
    assert [getattr(start, key) for key in (*fields, "trigger")] == [*expected, "request"]
    assert [getattr(end, key) for key in (*fields, "outcome")] == [*expected, "succeeded"]
    assert float(said[1]) == pytest.approx(end.duration, abs=0.001)  # type: ignore[attr-defined]


def sleeps_then_echoes(lease: RunningLease, n: int = 0) -> dict[str, int]:
    time.sleep(0.2)
    return echo(lease, n)


class Reaped:
    """A worker's hooks, as far as its runs call them: each run reaped."""

    def __init__(self) -> None:
        self.runs: list[RunningLease] = []

    def run_ended(self, running: RunningLease) -> None:
        self.runs.append(running)


def _run_in_thread(running: RunningLease, until: threading.Event) -> threading.Thread:
    """``running``'s work in a thread of its own, ending (succeeded) once ``until`` is set."""

    def work() -> None:
        try:
            until.wait(30)
            running.finish(None)
        finally:
            connections.close_all()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_the_runs_are_named_sorted_and_reaped_once_their_threads_end(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="django_bgtasks.worker")
    reaped = Reaped()
    held = Runs(hooks=reaped)  # type: ignore[arg-type]  (the one hook a Runs calls)
    now, later = threading.Event(), threading.Event()
    now.set()
    quick, slow = RunningLease.claim("r-quick", ttl=30), RunningLease.claim("r-slow", ttl=30)
    assert quick is not None and slow is not None
    slow_thread = _run_in_thread(slow, later)
    quick_thread = _run_in_thread(quick, now)
    held.add(slow, slow_thread)
    held.add(quick, quick_thread)
    try:
        assert (len(held), held.names()) == (2, ["r-quick", "r-slow"])
        assert "r-quick" in held and "r-other" not in held
        quick_thread.join(30)
        assert held.any_ended() and held.going() == [slow]
        held.reap()
        assert held.names() == ["r-slow"] and not held.any_ended()
        assert reaped.runs == [quick]
        ended = [r.getMessage() for r in caplog.records if " ended: " in r.getMessage()]
        assert len(ended) == 1 and re.fullmatch(
            rf"task 'r-quick' \(token {quick.token}, attempt 1\) ended: succeeded after \S+ s",
            ended[0],
        )
    finally:
        later.set()
        slow_thread.join(30)
    held.reap()
    assert (len(held), reaped.runs) == (0, [quick, slow])


def always(thread: threading.Thread) -> bool:
    """A worker still waiting for its runs (not stopping at once)."""
    return True


def test_a_run_still_going_past_the_grace_period_is_warned_of_unless_told_to_stop_waiting(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    held = Runs()
    until = threading.Event()
    stuck = RunningLease.claim("r-stuck", ttl=30)
    assert stuck is not None
    thread = _run_in_thread(stuck, until)
    held.add(stuck, thread)
    try:
        # A stop at once doesn't wait for the deadline (half a minute away).
        began = time.monotonic()
        held.wait(began + 30, 0.3, lambda thread: False)
        assert time.monotonic() - began < 10
        began = time.monotonic()
        held.wait(began + 0.3, 0.3, always)
        assert time.monotonic() - began >= 0.29
    finally:
        until.set()
        thread.join(30)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"task 'r-stuck' (token {stuck.token}) did not stop within the grace period (0.3 s); "
        "its lease expires after its ttl and another worker takes it over"
    ]
    held.wait(time.monotonic() + 5, 0.3, always)  # ended: nothing to wait for, nor to say
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1
