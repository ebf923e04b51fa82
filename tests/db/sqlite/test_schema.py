"""What SQLite's schema entries set up (db/sqlite/schema.py,
``django_bgtasks.db.sqlite.schema``), tested by what they do: the
run-history trigger (0002-0005), the claim's index (0018), the operator's
reads' indexes (0021) and the flow slots' trigger (0022); and that
unapplying a migration restores what came before it."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connections

from tests.db.test_schema import ENDINGS, _the_trigger_records_the_run

# --- the run-history trigger (0002-0005) ----------------------------------------------


@pytest.mark.parametrize("ending", ENDINGS)
def test_on_sqlite_the_trigger_records_every_run_that_ends(sqlite_alias: str, ending: str) -> None:
    _the_trigger_records_the_run(sqlite_alias, ending)


# --- the queue's indexes (0018, 0021) ---------------------------------------------------


def test_on_sqlite_a_claim_reads_the_ready_rows_in_its_order_and_without_0018_is_refused(
    sqlite_alias: str,
) -> None:
    """0018's index gives SQLite's claim of every queue its order (status,
    priority DESC, seq); a claim of named queues reads each by the ready
    rows' index led by the queue (0007). ``INDEXED BY`` holds each pick to
    its index: without 0018's, SQLite refuses the claim rather than sort
    every ready row to take the first few, as it did before 0018."""
    from django.db import OperationalError

    from django_bgtasks.db import engines
    from django_bgtasks.db.engines import _for_queues
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.manager import _claim_params

    connection = connections[sqlite_alias]

    def plan(queues: list[str] | None) -> str:
        claim = QueuedTask.objects._statements(connection).claim
        with connection.cursor() as cursor:
            params = engines.encode(connection, _claim_params("w", queues, 8))
            cursor.execute(f"EXPLAIN QUERY PLAN {_for_queues(claim, params)}", params)
            return " | ".join(str(row[-1]) for row in cursor.fetchall())

    # (The claim then ranks the few rows it picked by their flow keys: those
    # sorts are of at most its limit's rows.)
    assert "SEARCH t USING INDEX bgtasks_queued_claim (status=?)" in plan(None)
    by_queue = "SEARCH t USING INDEX bgtasks_queued_ready (status=? AND queue_name=?)"
    assert plan(["a", "b"]).count(by_queue) == 2
    previous = "0017_postgresql_partial_queue_indexes"
    call_command("migrate", "django_bgtasks", previous, database=sqlite_alias, verbosity=0)
    try:
        with pytest.raises(OperationalError, match="no such index: bgtasks_queued_claim"):
            plan(None)
    finally:
        call_command("migrate", "django_bgtasks", database=sqlite_alias, verbosity=0)
    assert "SEARCH t USING INDEX bgtasks_queued_claim (status=?)" in plan(None)


def test_0021_indexes_the_operators_reads_on_sqlite(sqlite_alias: str) -> None:
    with connections[sqlite_alias].cursor() as cursor:
        cursor.execute(
            "SELECT name, sql FROM sqlite_master"
            " WHERE type = 'index' AND name LIKE 'bgtasks_queued_%'"
        )
        found = dict(cursor.fetchall())
    for name, columns in {
        "bgtasks_queued_queue": "(queue_name, seq)",
        "bgtasks_queued_task": "(task_path, seq)",
        "bgtasks_queued_status": "(status, seq)",
    }.items():
        assert found[name].endswith(columns), found[name]


# --- the flow slots' trigger (0022) -----------------------------------------------------


def test_0022_on_sqlite_makes_the_slots_only_when_a_key_lacks_them_and_unapplied_restores_0013s(
    sqlite_alias: str,
) -> None:
    """SQLite's trigger asks for slot N before its body builds the slots."""
    from django_bgtasks.models import FlowSlot
    from tests import dbtools, djtasks

    def trigger_condition() -> str:
        with connections[sqlite_alias].cursor() as cursor:
            cursor.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger'"
                " AND name = 'bgtasks_flow_slots_create'"
            )
            return str(cursor.fetchone()[0]).split("BEGIN")[0]

    def enqueue_and_count(prefix: str) -> int:
        backend = djtasks.per_account.get_backend()
        backend.enqueue_many(djtasks.per_account, [((f"{prefix}{n}",), {}) for n in range(3)])
        slots = FlowSlot.objects.using(sqlite_alias).filter(
            flow_key__startswith=f"account:{prefix}"
        )
        return slots.count()

    assert "NOT EXISTS" in trigger_condition()
    assert enqueue_and_count("new") == 3 * 2
    call_command("migrate", "django_bgtasks", "0021_queue_list_indexes", database=sqlite_alias,
                 verbosity=0)  # fmt: skip
    try:
        assert "NOT EXISTS" not in trigger_condition()
        # (as the release before 0028 enqueues: that table has none of its columns)
        dbtools.enqueue_as_before_0028(
            sqlite_alias, djtasks.per_account, [(f"old{n}",) for n in range(3)]
        )
        assert (
            FlowSlot.objects.using(sqlite_alias).filter(flow_key__startswith="account:old").count()
            == 6
        )
    finally:
        call_command("migrate", "django_bgtasks", database=sqlite_alias, verbosity=0)
    assert "NOT EXISTS" in trigger_condition()
    assert enqueue_and_count("again") == 3 * 2
