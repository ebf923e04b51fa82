"""How a worker stops (worker/stopping.py): its stop flag ends its idle wait
at once, whoever sets it; a stop at once hands back the runs still going,
background runs ``interrupted`` and Django Tasks ``READY`` again with the
attempt given back, each once, by its fenced statement."""

from __future__ import annotations

import threading
import time

import pytest

from django_bgtasks import RunningLease
from django_bgtasks.choices import Outcome
from django_bgtasks.models import QueuedTask
from django_bgtasks.push import feed as changes
from django_bgtasks.queue.execute import QueuedLease
from django_bgtasks.worker import stopping
from django_bgtasks.worker.loop import Worker
from tests import djtasks
from tests.worker.test_loop import LONG_POLL, WITHIN, before_the_poll, echo, make_task, runs


@pytest.mark.parametrize("how", ["stop()", "stopping.set()"])
def test_stop_ends_the_wait_at_once_and_closes_the_workers_watcher(
    db_alias: str, how: str
) -> None:
    """Both ways: the command's signal handler sets ``stopping`` itself."""
    feed = changes.feed()
    before = len(feed._watchers)
    worker = Worker([make_task("w-echo", echo)], poll=LONG_POLL)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        before_the_poll("watching", lambda: len(feed._watchers) == before + 1)
        assert changes.feed().synced.wait(WITHIN)
        time.sleep(0.3)  # into its 30 s wait
    finally:
        started = time.monotonic()
        if how == "stop()":
            worker.stop()
        else:
            worker.stopping.set()
        thread.join(WITHIN)
    assert not thread.is_alive() and time.monotonic() - started < WITHIN
    assert len(feed._watchers) == before


def test_the_flag_wakes_whoever_waits_as_it_is_set() -> None:
    woken: list[str] = []
    flag = stopping.Stopping(lambda: woken.append("woken"))
    assert not flag.is_set() and woken == []
    flag.set()
    assert flag.is_set() and flag.wait(0) and woken == ["woken"]


def test_a_stop_at_once_hands_back_each_run_still_going_once(
    tasks_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="django_bgtasks.worker")
    running = RunningLease.claim("s-stuck", ttl=30, value={"step": 1})
    assert running is not None
    result = djtasks.add.enqueue(1, 2)
    claim = QueuedTask.objects.claim("stopping-worker", queues=None)
    assert claim is not None
    queued = QueuedLease(claim)  # (its task not started: the hand-back is all it sees)

    stopping.hand_back("stopping-worker", [running], [queued])

    [run] = runs("s-stuck")
    assert (run.outcome, run.token, run.value) == (Outcome.INTERRUPTED, running.token, {"step": 1})
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert (row.status, row.attempts, row.errors) == ("READY", 0, [])
    said = [r.getMessage() for r in caplog.records if r.name == "django_bgtasks.worker"]
    assert said[0] == "worker stopping-worker: stopping at once; handing back 2 run(s) still going"
    assert said[1].startswith(
        f"task 's-stuck' (token {running.token}, attempt 1) ended: interrupted after "
    )
    assert said[2].startswith(
        f"{claim.described} (token {claim.token}, attempt 1) ended: READY (to be run again) "
    )
    assert len(said) == 3

    # Ended: a second hand-back writes nothing.
    stopping.hand_back("stopping-worker", [running], [queued])
    assert len(runs("s-stuck")) == 1
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert (row.status, row.attempts, row.token) == ("READY", 0, claim.token)
    said = [r.getMessage() for r in caplog.records if r.name == "django_bgtasks.worker"]
    assert len([line for line in said if line.startswith("task 's-stuck' ")]) == 1
    assert len([line for line in said if line.startswith(claim.described)]) == 1
