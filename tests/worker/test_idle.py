"""A worker's idle queue threads (django_bgtasks/worker/idle.py): one of them
polls, a ready task wakes one, and a thread that claimed a task wakes the
next; with threads (IdleThreads alone), then through a worker's threads on
every engine, and on PostgreSQL, where the change feed wakes them."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from django_bgtasks.models import QueuedTask
from django_bgtasks.push import feed as changes
from django_bgtasks.queue.manager import QueueManager
from django_bgtasks.worker.idle import IdleThreads
from django_bgtasks.worker.loop import Worker
from tests import djtasks


def notified() -> IdleThreads:
    """The idle threads of a worker of 8 whose change feed listens."""
    return IdleThreads(8, notified=lambda: True)


def waiting(
    idle: IdleThreads, poll: float
) -> tuple[threading.Event, threading.Thread, list[float]]:
    """A thread waiting in ``idle``; the list gets how long its wait lasted."""
    event, took = threading.Event(), []

    def wait() -> None:
        began = time.monotonic()
        idle.wait(event, poll)
        took.append(time.monotonic() - began)

    thread = threading.Thread(target=wait)
    thread.start()
    return event, thread, took


def test_a_wake_up_goes_to_the_last_thread_to_wait_and_to_it_alone() -> None:
    idle = notified()
    first, first_thread, _ = waiting(idle, 10)
    time.sleep(0.05)
    last, last_thread, _ = waiting(idle, 10)
    time.sleep(0.05)
    idle.wake()
    last_thread.join(5)
    assert not last_thread.is_alive() and last.is_set()
    assert first_thread.is_alive() and not first.is_set()
    idle.wake()
    first_thread.join(5)
    assert not first_thread.is_alive()


def test_one_waiting_thread_polls_and_the_others_wait_to_be_woken() -> None:
    """The first to wait polls (its wait ends in the second half of the
    poll); the second waits past it, until it is woken."""
    idle = notified()
    _, poller, poller_took = waiting(idle, 0.2)
    time.sleep(0.05)
    _, other, other_took = waiting(idle, 0.2)
    poller.join(5)
    assert poller_took and 0.09 < poller_took[0] < 2
    time.sleep(0.3)
    assert other.is_alive(), "a second idle thread polled too"
    idle.wake()
    other.join(5)
    assert other_took[0] > 0.3  # past any poll (0.1-0.2 s)


def test_a_wake_up_no_thread_waits_for_is_owed_to_the_next_unless_told_not_to() -> None:
    """A thread claiming when a task is committed may have read the queue
    before it: its next wait returns at once, and only that one."""
    idle = notified()
    idle.wake(owe=False)
    _, thread, took = waiting(idle, 0.2)
    thread.join(5)
    assert took[0] > 0.09, "a wake-up that was not owed was kept"
    idle.wake()
    _, thread, took = waiting(idle, 5)
    thread.join(5)
    assert took[0] < 1, "the owed wake-up was lost"
    _, thread, took = waiting(idle, 0.2)
    thread.join(5)
    assert took[0] > 0.09, "one owed wake-up was kept for two waits"


def test_without_notifications_the_poller_looks_as_often_as_every_thread_did() -> None:
    """No change feed listening (SQLite, MySQL, a pooler): a task waits for
    no thread longer than when each of the 8 polled alone, so the one that
    polls looks 8 times a poll (a wait of 0.05-0.1 s for a poll of 0.8)."""
    idle = IdleThreads(8, notified=lambda: False)
    _, thread, took = waiting(idle, 0.8)
    thread.join(5)
    assert 0.04 < took[0] < 0.3


# --- a worker's threads ------------------------------------------------------------------


@pytest.fixture
def wants(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many threads wanted a task in each round of the worker's claims
    (``finish_and_claim``'s ``limit``), as they reach the real statement."""
    counted: list[int] = []
    finish_and_claim = QueueManager.finish_and_claim

    def counting(self: QueueManager, *args: Any, limit: int = 0, **kwargs: Any) -> Any:
        if limit:
            counted.append(limit)
        return finish_and_claim(self, *args, limit=limit, **kwargs)

    monkeypatch.setattr(QueueManager, "finish_and_claim", counting)
    return counted


@contextlib.contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        connections.close_all()
    assert not thread.is_alive()


def test_an_idle_worker_polls_by_a_read_and_claims_once_a_task_is_ready(
    tasks_alias: str, wants: list[int], probes: list[bool]
) -> None:
    """Eight idle threads, one polling (every engine): each poll is a read
    that finds nothing, never a claim (on MariaDB an empty claim cost the
    server 8 times the read). A task enqueued then is claimed by one thread
    and runs."""
    with running(Worker([], concurrency=8, poll=0.1, run_queued=True)):
        time.sleep(0.5)  # past the start, when every thread claims
        wants.clear()
        probes.clear()
        time.sleep(1.0)
        assert wants == [] and len(probes) >= 5 and not any(probes), (wants, probes)
        result = djtasks.add.enqueue(1, 2)
        _wait_for(lambda: _status(tasks_alias, result.id) == "SUCCESSFUL")
        assert wants and wants[0] == 1, wants


def test_a_listening_worker_polls_once_a_poll(
    pg_direct_alias: str, wants: list[int], probes: list[bool]
) -> None:
    """PostgreSQL's change feed listening, the poll is the fallback: eight
    idle threads, a poll of 0.1 s (a wait of 0.05-0.1 s), over 1.5 s at most
    30 polls, as one thread polling makes (before, each thread polled, and
    they made 144-161 claims), each a read: no claim."""
    with running(Worker([], concurrency=8, poll=0.1, run_queued=True)):
        assert changes.feed().synced.wait(10)
        time.sleep(0.5)
        wants.clear()
        probes.clear()
        time.sleep(1.5)
        assert 5 <= len(probes) <= 30 and wants == [], (probes, wants)


def test_a_ready_task_wakes_one_thread_and_a_burst_reaches_them_all(
    pg_direct_alias: str, wants: list[int], tmp_path: Path
) -> None:
    """PostgreSQL's change feed: with a poll of 30 s, no thread claims unless
    woken. One task wakes one thread, which wakes one more as it starts it;
    its end's round asks for its next, and its thread once more (that round
    read the table before its end: a retry, or a flow slot, it freed is for
    the next claim): four claims, not ten. Eight
    tasks of 1 s in one batch (one notification) each reach a thread of
    their own: they all run at once."""
    record = tmp_path / "record"
    with running(Worker([], concurrency=8, poll=30, run_queued=True)):
        assert changes.feed().synced.wait(10)
        time.sleep(0.5)
        wants.clear()
        djtasks.record.enqueue(str(record), "one")
        _wait_for(lambda: record.exists() and record.read_text().count("\n") == 1)
        time.sleep(0.3)
        assert sum(wants) <= 4, wants
        started = tmp_path / "started"
        backend = djtasks.sleeps.get_backend()
        backend.enqueue_many(djtasks.sleeps, [((str(started), 1.0), {})] * 8)
        began = time.monotonic()
        _wait_for(lambda: started.exists() and started.read_text().count("\n") == 8)
        assert time.monotonic() - began < 0.9, "a task waited for another to end"


def _status(alias: str, result_id: str) -> str:
    return str(QueuedTask.objects.using(alias).get(uuid=result_id).status)


def _wait_for(condition: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
