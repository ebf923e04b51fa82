"""What SQLite's schema entries set up (db/sqlite/schema.py,
``django_bgtasks.db.sqlite.schema``), tested by what they do: the
run-history trigger (0002-0005), the claim's index (0018), the operator's
reads' indexes (0021) and the flow slots' trigger (0022); and that
unapplying a migration restores what came before it."""

from __future__ import annotations

import dataclasses

import pytest
from django.core.management import call_command
from django.db import connections, transaction

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

    def plan(queues: list[str] | None) -> str:
        return _claim_plan(sqlite_alias, queues)

    # 0018's index dropped alone, and put back by the rollback (migrated back
    # to 0017, the claim would miss 0028's indexes first). First: an EXPLAIN
    # prepared before the drop (the driver's statement cache) would not see it.
    with transaction.atomic(using=sqlite_alias):
        with connections[sqlite_alias].cursor() as cursor:
            cursor.execute("DROP INDEX bgtasks_queued_claim")
        with pytest.raises(OperationalError, match="no such index: bgtasks_queued_claim"):
            plan(None)
        transaction.set_rollback(True, using=sqlite_alias)
    # (The claim then ranks the few rows it picked by their flow keys: those
    # sorts are of at most its limit's rows.)
    assert "SEARCH t USING INDEX bgtasks_queued_claim (status=?)" in plan(None)
    by_queue = "SEARCH t USING INDEX bgtasks_queued_ready (status=? AND queue_name=?)"
    assert plan(["a", "b"]).count(by_queue) == 2


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


# --- the fair shares (0028) -----------------------------------------------------------


def test_0028_on_sqlite_the_claim_reads_keys_and_unkeyed_rows_from_their_own_indexes(
    sqlite_alias: str,
) -> None:
    """The claim reads each key's rows from 0028's index of the keyed ready
    rows (queue, priority, key), and in a queue with keyed rows the rows
    without a key from their own index, of named queues and of every queue."""

    def plan(queues: list[str] | None) -> str:
        return _claim_plan(sqlite_alias, queues)

    each_key = (
        "SEARCH t USING INDEX bgtasks_queued_fair (queue_name=? AND priority=? AND fairness_key=?)"
    )
    next_key = "USING INDEX bgtasks_queued_fair (queue_name=? AND priority=? AND fairness_key>?)"
    unkeyed = "SEARCH t USING INDEX bgtasks_queued_unkeyed (queue_name=?)"
    for queues in (None, ["a"], ["a", "b"]):
        found = plan(queues)
        assert each_key in found and next_key in found, (queues, found)
        assert found.count(unkeyed) == len(queues or ["every"]), (queues, found)


def test_0028_on_sqlite_a_start_moves_its_keys_turn_on_and_unapplied_drops_the_trigger(
    sqlite_alias: str,
) -> None:
    """Each start moves its key's next turn on by one over its weight, from
    where the claim started it; the key's row is made at its first start."""
    from django_bgtasks.models import FairShare, QueuedTask
    from tests import djtasks

    def objects() -> set[str]:
        with connections[sqlite_alias].cursor() as cursor:
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE name IN ('bgtasks_fair_share_start',"
                " 'bgtasks_queued_fair', 'bgtasks_queued_unkeyed')"
            )
            return {name for (name,) in cursor.fetchall()}

    def shares() -> dict[str, tuple[float, float, bool]]:
        return {
            key: (vtime, turn, started is not None)
            for key, vtime, turn, started in FairShare.objects.using(sqlite_alias).values_list(
                "fairness_key", "vtime", "turn", "started_at"
            )
        }

    def claim(limit: int) -> None:
        assert len(QueuedTask.objects.claim_many("w", queues=["default"], limit=limit)) == limit

    backend = djtasks.fair_add.get_backend()
    backend.enqueue_many(djtasks.fair_add, [((n, n // 10), {}) for n in range(20)])
    assert not FairShare.objects.using(sqlite_alias).exists()
    claim(1)
    assert shares() == {"tenant:0": (1.0, 0.0, True)}
    # Tenant 1 starts at 0 and 1, tenant 0 at 1: tenant 0's row is written
    # first (its seq is lower), and its turn, 1, is the queue's clock then;
    # tenant 1 still starts at 0 (counted from the clock before the claim).
    claim(3)
    assert shares() == {"tenant:0": (2.0, 1.0, True), "tenant:1": (2.0, 1.0, True)}
    QueuedTask.objects.using(sqlite_alias).all().delete()
    FairShare.objects.using(sqlite_alias).all().delete()
    # Tenant 1 (weight 2) starts at 0 and 0.5, tenant 0 at 0.
    weighted = dataclasses.replace(djtasks.fair_add, fairness_weight={"tenant:1": 2})
    weighted.get_backend().enqueue_many(weighted, [((n, n % 2), {}) for n in range(10)])
    claim(3)
    assert shares() == {"tenant:0": (1.0, 0.0, True), "tenant:1": (1.0, 0.5, True)}
    # The queue's clock is now 0.5: both start from their next turns, 1.0.
    claim(2)
    vtimes = dict(FairShare.objects.using(sqlite_alias).values_list("fairness_key", "vtime"))
    assert vtimes == {"tenant:0": 2.0, "tenant:1": 1.5}
    assert objects() == {
        "bgtasks_fair_share_start",
        "bgtasks_queued_fair",
        "bgtasks_queued_unkeyed",
    }
    call_command("migrate", "django_bgtasks", "0027_finished_by_time", database=sqlite_alias,
                 verbosity=0)  # fmt: skip
    try:
        assert objects() == set()
    finally:
        call_command("migrate", "django_bgtasks", database=sqlite_alias, verbosity=0)
    assert len(objects()) == 3


def _claim_plan(alias: str, queues: list[str] | None) -> str:
    """SQLite's plan of a claim of 8 of ``queues`` (None: every queue), its
    steps joined by " | "."""
    from django_bgtasks.db import engines
    from django_bgtasks.db.engines import _for_queues
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.manager import _claim_params

    connection = connections[alias]
    claim = QueuedTask.objects._statements(connection).claim
    with connection.cursor() as cursor:
        params = engines.encode(connection, _claim_params("w", queues, 8))
        cursor.execute(f"EXPLAIN QUERY PLAN {_for_queues(claim, params)}", params)
        return " | ".join(str(row[-1]) for row in cursor.fetchall())
