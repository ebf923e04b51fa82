"""PostgreSQL's lease statements (db/postgresql/leases.py): the clock is
``clock_timestamp()``, which moves inside a transaction (``now()`` is
frozen at its start), and a release writes its run's history in its own
statement (a data-modifying CTE: no trigger does it there). What every
engine's statements do: tests/core/test_leases.py."""

from __future__ import annotations

import time

from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_bgtasks.db import engines
from django_bgtasks.db.postgresql import leases
from django_bgtasks.models import BackgroundTask, TaskRun

objects = BackgroundTask.objects


def test_the_clock_moves_inside_a_transaction(pg_alias: str) -> None:
    """A heartbeat or a claim that waited on a lock judges staleness by the
    time after the wait, not the time its transaction began."""
    connection = connections[pg_alias]
    clock = leases.STATEMENTS.clock.format(**leases.FRAGMENTS)
    with transaction.atomic(using=pg_alias):
        [first] = engines.run(connection, "clock", clock, {})
        time.sleep(0.05)
        [second] = engines.run(connection, "clock", clock, {})
    assert (second["db_now"] - first["db_now"]).total_seconds() >= 0.05


def test_a_release_records_its_run_in_the_same_statement(pg_alias: str) -> None:
    lease = objects.try_claim("recorded", "a", {"n": 1}, ttl=30)
    assert lease is not None
    with CaptureQueriesContext(connections[pg_alias]) as queries:
        assert objects.release("recorded", "a", {"n": 2}, token=lease.token)
    [release] = queries.captured_queries
    assert "WITH ended AS" in release["sql"] and "INSERT INTO" in release["sql"]
    run = TaskRun.objects.using(pg_alias).get(name="recorded")
    assert (run.token, run.owner, run.outcome, run.value) == (
        lease.token,
        "a",
        "succeeded",
        {"n": 2},
    )
    state = objects.get_state("recorded")
    assert state is not None and (state.running, state.finished_at) == (False, run.finished_at)
