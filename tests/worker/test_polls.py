"""How long a worker waits before it looks again (worker/polls.py): between
polls, a wait spread over the second half of ``--poll``; while the database
can't be reached, a wait that doubles up to its cap, said in one line, with
the thread's connection closed so that the next statement reconnects."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.db import OperationalError, connections

from django_bgtasks.worker.polls import MAX_BACKOFF_SECONDS, back_off, spread


def test_the_wait_between_polls_is_spread_over_the_second_half_of_poll() -> None:
    # Workers woken together must not poll in step ever after: each wait is
    # drawn afresh, never longer than --poll.
    waits = [spread(2.0) for _ in range(1000)]
    assert all(1.0 <= wait <= 2.0 for wait in waits)
    assert max(waits) - min(waits) > 0.8, "the waits are not spread"
    assert len(set(waits)) > 990


def test_a_wait_after_an_outage_doubles_up_to_its_cap_and_says_why(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger("django_bgtasks.worker")
    error = OperationalError("server closed the connection unexpectedly\n\tThis probably...")
    connection = connections[db_alias]
    connection.ensure_connection()
    stop = threading.Event()
    began = time.monotonic()
    assert back_off(log, "worker w: queue", 0.2, error, stop) == 0.4
    assert time.monotonic() - began >= 0.19  # it waited the wait it was given
    assert connection.connection is None  # closed: the next statement reconnects
    [record] = [r for r in caplog.records if r.name == "django_bgtasks.worker"]
    assert (record.levelname, record.getMessage()) == (
        "WARNING",
        "worker w: queue: database unreachable, retrying in 0.2 s: "
        "server closed the connection unexpectedly",
    )
    # Doubled up to the cap; a stop ends the wait at once.
    stop.set()
    began = time.monotonic()
    assert back_off(log, "worker w", 20.0, error, stop) == MAX_BACKOFF_SECONDS
    assert back_off(log, "worker w", MAX_BACKOFF_SECONDS, error, stop) == MAX_BACKOFF_SECONDS
    assert time.monotonic() - began < 5
