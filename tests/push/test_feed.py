"""The change feed (django_bgtasks.changes) and claims that wait for a lease.

Real databases and real connections: on PostgreSQL the notifications of
migration 0008's trigger, with the listening connection killed by the server
in one test; on SQLite and MariaDB the per-process poll.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from django.db import connections

from django_bgtasks import lease
from django_bgtasks.exceptions import LeaseHeld
from django_bgtasks.models import BackgroundTask
from django_bgtasks.push import feed as changes
from tests.tools import needs_pgbouncer

WITHIN = 5.0  # seconds a change may take to arrive (the poll's interval is 0.05 s here)


@pytest.fixture(autouse=True)
def quick_polls(settings: object) -> None:
    """(Each test's feeds are stopped after it: tests/conftest.py's fresh_feeds.)"""
    settings.BGTASKS_CHANGES_POLL_INTERVAL = 0.05  # type: ignore[attr-defined]


def next_change(watcher: changes.Watcher, name: str) -> changes.Change:
    deadline = time.monotonic() + WITHIN
    while time.monotonic() < deadline:
        watcher.wait(deadline - time.monotonic())
        for change in watcher.take():
            if change.name == name:
                return change
    raise AssertionError(f"no change of {name!r} within {WITHIN} s")


def later(delay: float, call: object, *args: object) -> threading.Thread:
    """``call(*args)`` after ``delay`` seconds, in a thread that then closes its connections."""

    def run() -> None:
        time.sleep(delay)
        try:
            call(*args)  # type: ignore[operator]
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def synced(watcher: changes.Watcher) -> changes.Watcher:
    assert watcher.feed.synced.wait(WITHIN)
    watcher.take()
    return watcher


def test_every_lease_operation_reaches_a_watcher_with_the_new_state(db_alias: str) -> None:
    with synced(changes.watch(["job"])) as watcher:
        claimed = BackgroundTask.objects.try_claim("job", "a", {"done": 0})
        assert claimed is not None
        state = next_change(watcher, "job").state
        assert state is not None and state.running and state.token == claimed.token
        assert BackgroundTask.objects.update_state("job", "a", {"done": 5}, token=claimed.token)
        state = next_change(watcher, "job").state
        assert state is not None and state.value == {"done": 5}
        assert BackgroundTask.objects.request_cancel("job")
        state = next_change(watcher, "job").state
        assert state is not None and state.cancel_requested
        assert BackgroundTask.objects.release("job", "a", token=claimed.token)
        state = next_change(watcher, "job").state
        assert state is not None and not state.running and state.outcome == "succeeded"


def test_a_watcher_of_one_name_sees_no_other_and_a_heartbeat_is_no_change(db_alias: str) -> None:
    with synced(changes.watch(["job"])) as watcher:
        other = BackgroundTask.objects.try_claim("other", "a")
        claimed = BackgroundTask.objects.try_claim("job", "a")
        assert other is not None and claimed is not None
        next_change(watcher, "job")
        assert BackgroundTask.objects.heartbeat("job", "a", token=claimed.token)
        time.sleep(0.5)
        assert [change.name for change in watcher.take()] == []


def test_a_silent_holder_turning_stale_is_a_change(db_alias: str) -> None:
    with synced(changes.watch(["job"])) as watcher:
        assert BackgroundTask.objects.try_claim("job", "a", ttl=1) is not None
        assert next_change(watcher, "job").state.running  # type: ignore[union-attr]
        state = next_change(watcher, "job").state  # nobody writes: the ttl runs out
        assert state is not None and state.stale and not state.running


def test_one_feed_serves_every_watcher_of_the_process(db_alias: str) -> None:
    watchers = [changes.watch(["job"]) for _ in range(50)]
    try:
        assert len({watcher.feed for watcher in watchers}) == 1
        synced(watchers[0])
        for watcher in watchers:
            watcher.take()
        assert BackgroundTask.objects.try_claim("job", "a") is not None
        for watcher in watchers:
            assert next_change(watcher, "job").state is not None
    finally:
        for watcher in watchers:
            watcher.close()


def test_a_killed_listening_connection_reconnects_and_heals_what_it_missed(
    pg_direct_alias: str,
) -> None:
    with synced(changes.watch(["job"])) as watcher:
        feed = watcher.feed
        pid = feed.listener_pid
        assert pid is not None and feed.connects == 1
        with connections[pg_direct_alias].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            # Changed while the listener is gone: its notification goes nowhere.
            assert BackgroundTask.objects.try_claim("job", "a") is not None
        state = next_change(watcher, "job").state
        assert state is not None and state.running
        assert feed.connects == 2 and feed.listener_pid not in (None, pid)
        # And it listens again.
        assert BackgroundTask.objects.force_release("job")
        state = next_change(watcher, "job").state
        assert state is not None and state.outcome == "released-by-operator"


def test_the_listener_is_one_connection_named_for_operators(pg_direct_alias: str) -> None:
    with (
        synced(changes.watch(["a"])),
        synced(changes.watch(["b"])),
        connections[pg_direct_alias].cursor() as cursor,
    ):
        cursor.execute(
            # This database's: the machine's server may serve other sites too.
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            ["bgtasks-changes"],
        )
        assert cursor.fetchone()[0] == 1


@needs_pgbouncer
@pytest.mark.django_db(transaction=True, databases=["postgres", "pgbouncer"])
def test_behind_a_pooler_the_feed_polls_and_says_so_once(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The transaction-pooling PgBouncer with Django's default settings: a
    LISTEN there would hear nothing, and nothing in the settings says so. The
    feed finds out from its connection, polls, and says so once."""
    settings.BGTASKS_DATABASE = "pgbouncer"
    with (
        caplog.at_level(logging.WARNING, logger="django_bgtasks.changes"),
        synced(changes.watch(["pooled"])) as watcher,
    ):
        claimed = BackgroundTask.objects.try_claim("pooled", "a", {"done": 0})
        assert claimed is not None
        state = next_change(watcher, "pooled").state
        assert state is not None and state.token == claimed.token
        assert watcher.feed.listener_pid is None and watcher.feed.connects == 0
    [said] = [r.getMessage() for r in caplog.records if "instead of listening" in r.getMessage()]
    assert "'pgbouncer'" in said and "polls every 0.05 s" in said


# --- waiting for a lease ------------------------------------------------------------


def test_a_waiting_claim_gets_the_lease_when_it_is_released(db_alias: str) -> None:
    held = BackgroundTask.objects.try_claim("job", "a", ttl=60)
    assert held is not None
    releaser = later(0.3, BackgroundTask.objects.release, "job", "a")
    started = time.monotonic()
    got = BackgroundTask.objects.try_claim("job", "b", ttl=60, wait=30)
    waited = time.monotonic() - started
    releaser.join()
    assert got is not None and got.token == held.token + 1
    assert 0.25 < waited < 5  # woken by the release, long before the ttl or the wait


def test_a_waiting_claim_takes_over_when_the_holder_goes_silent(db_alias: str) -> None:
    held = BackgroundTask.objects.try_claim("job", "a", ttl=1)
    assert held is not None
    got = BackgroundTask.objects.try_claim("job", "b", wait=10)
    assert got is not None and got.token == held.token + 1


def test_a_waiting_claim_gives_up_when_its_time_is_up(db_alias: str) -> None:
    assert BackgroundTask.objects.try_claim("job", "a", ttl=60) is not None
    started = time.monotonic()
    assert BackgroundTask.objects.try_claim("job", "b", wait=0.5) is None
    assert 0.5 <= time.monotonic() - started < 3


def test_lease_waits_too_and_raises_lease_held_when_time_is_up(db_alias: str) -> None:
    assert BackgroundTask.objects.try_claim("job", "a", ttl=60) is not None
    with pytest.raises(LeaseHeld), lease("job", wait=0.2):
        pass
    releaser = later(0.2, BackgroundTask.objects.release, "job", "a")
    with lease("job", wait=10) as running:
        assert running.token == 2
    releaser.join()


@pytest.mark.parametrize(
    ("wait", "error"),
    [(-1, ValueError), (float("nan"), ValueError), ("5", TypeError), (True, TypeError)],
)
def test_a_bad_wait_is_refused_before_any_sql(db_alias: str, wait: object, error: type) -> None:
    with pytest.raises(error, match="wait"):
        BackgroundTask.objects.try_claim("job", "a", wait=wait)  # type: ignore[arg-type]
    assert BackgroundTask.objects.get_state("job") is None
