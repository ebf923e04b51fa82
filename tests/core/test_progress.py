"""When a run's ``update()`` writes and when it waits (django_bgtasks/core/progress.py),
without a database; tests/core/test_runner.py has the same through ``lease()``."""

from __future__ import annotations

import time

from django_bgtasks.core.progress import NOTHING, Progress


def test_the_first_offer_writes_and_the_next_one_waits() -> None:
    progress = Progress(3600)
    assert progress.offer(1) is True
    assert progress.take() == 1
    progress.written(1)
    assert progress.deadline() is None
    assert progress.offer(2) is False
    assert progress.take() == 2
    assert progress.wake.is_set()  # the heartbeat thread is told of the new deadline
    deadline = progress.deadline()
    assert deadline is not None and deadline > time.monotonic() + 3000


def test_the_latest_waiting_value_wins_and_flush_writes() -> None:
    progress = Progress(3600)
    progress.offer(1)
    progress.written(progress.take())
    assert progress.offer(2) is False
    assert progress.offer(3) is False
    assert progress.offer(4, flush=True) is True
    assert progress.take() == 4


def test_a_value_that_arrives_during_a_write_stays_waiting() -> None:
    progress = Progress(3600)
    progress.offer(1)
    taken = progress.take()
    progress.offer(2)  # while 1 is being written
    progress.written(taken)
    assert progress.take() == 2


def test_a_write_without_a_value_does_not_move_the_deadline() -> None:
    progress = Progress(0.05)
    progress.offer(1)
    progress.written(progress.take())
    progress.offer(2)
    before = progress.deadline()
    progress.written(NOTHING)  # a heartbeat that raced the offer: 2 still waits
    assert progress.take() == 2 and progress.deadline() == before


def test_after_a_quiet_interval_an_offer_writes_again() -> None:
    progress = Progress(0.05)
    progress.offer(1)
    progress.written(progress.take())
    time.sleep(0.06)
    assert progress.offer(2) is True


def test_an_interval_of_zero_writes_every_offer() -> None:
    progress = Progress(0)
    for value in range(3):
        assert progress.offer(value) is True
        progress.written(progress.take())
