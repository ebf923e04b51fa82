"""SQLite's statements of the queue (db/sqlite/queue.py): the claim and the
idle poll held to the ready rows' indexes (``INDEXED BY``), whatever
``ANALYZE`` says; and the times they write, the lease statements' UTC text,
a retry's ``run_after`` its delay on by the database's clock. What every
engine's queue does: tests/queue/; the work of a claim:
tests/queue/test_claim_reads.py."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.db import connections

from django_bgtasks.db import engines
from django_bgtasks.db.shared import with_queues
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.manager import Ending
from tests import djtasks


@pytest.mark.parametrize(
    ("queues", "index"),
    [(None, "bgtasks_queued_claim"), (["default"], "bgtasks_queued_ready")],
    ids=["every-queue", "one-queue"],
)
def test_the_claim_and_the_idle_poll_read_the_ready_rows_by_their_index(
    sqlite_alias: str, queues: list[str] | None, index: str
) -> None:
    connection = connections[sqlite_alias]
    backend = djtasks.add.get_backend()
    backend.enqueue_many(djtasks.add, [((n, 1), {}) for n in range(50)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    rendered = QueuedTask.objects._statements(connection)
    params = {"owner": "w", "limit": 8, "all": queues is None, "queues": json.dumps(queues or [])}
    for statement in ("claim", "any_ready"):
        query = with_queues(getattr(rendered, statement), None if queues is None else 1)
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {query}", params)
            plan = " / ".join(row[-1] for row in cursor.fetchall())
        # The ready rows (``t``) looked up in that index: no scan of the table.
        assert re.search(rf"SEARCH t USING (COVERING )?INDEX {index} ", plan), plan
    assert engines.run(connection, "any_ready", rendered.any_ready, params, queue=True) == [
        {"ready": 1}
    ]


@pytest.mark.parametrize("queues", [None, ["default"]], ids=["every-queue", "one-queue"])
def test_the_fair_claim_reads_each_keys_rows_by_rowid_whatever_analyze_said(
    sqlite_alias: str, queues: list[str] | None
) -> None:
    """With the statistics ANALYZE gathered of a small table (as another
    test, or a site, leaves them), the claim still reads each key's rows,
    and each queue's rows without a key, by their rowid, the keys first: no
    scan of the table (it scanned every row, testing each against a key's
    list, before its joins were CROSS JOINs)."""
    connection = connections[sqlite_alias]
    djtasks.add.get_backend().enqueue_many(djtasks.add, [((n, 1), {}) for n in range(50)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    QueuedTask.objects.using(sqlite_alias).all().delete()
    backend = djtasks.fair_add.get_backend()
    backend.enqueue_many(djtasks.fair_add, [((n, n % 3), {}) for n in range(300)])
    backend.enqueue_many(djtasks.add, [((n, 1), {}) for n in range(30)])
    rendered = QueuedTask.objects._statements(connection)
    params = {"owner": "w", "limit": 8, "all": queues is None, "queues": json.dumps(queues or [])}
    query = with_queues(rendered.claim, None if queues is None else 1)
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {query}", params)
        plan = [row[-1] for row in cursor.fetchall()]
    assert not [step for step in plan if step.startswith("SCAN r")], plan
    assert "SEARCH r USING INTEGER PRIMARY KEY (rowid=?)" in plan, plan


def test_its_times_are_djangos_utc_text_and_a_delay_is_by_the_databases_clock(
    sqlite_alias: str,
) -> None:
    djtasks.add.enqueue(1, 2)
    before = dt.datetime.now(dt.UTC)
    [claim] = QueuedTask.objects.claim_many("w", queues=None, limit=1)
    row = QueuedTask.objects.using(sqlite_alias).get(seq=claim.seq)
    assert row.started_at == row.last_attempted_at == claim.started_at
    assert before - dt.timedelta(seconds=1) <= row.started_at <= dt.datetime.now(dt.UTC)
    retry = Ending(claim.seq, "w", claim.token, "READY", delay=60.0)
    assert QueuedTask.objects.finish_many([retry]) == {claim.seq: True}
    row.refresh_from_db()
    assert row.status == "READY" and row.run_after is not None
    assert (row.run_after - row.updated_at).total_seconds() == pytest.approx(60, abs=0.002)
    assert QueuedTask.objects.any_ready(queues=None) is False  # not before its time
