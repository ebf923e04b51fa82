"""What PostgreSQL's schema entries set up (db/postgresql/schema.py,
``django_bgtasks.db.postgresql.schema``), tested by what they do: the
fillfactor and HOT heartbeats (0002), the change notifications (0008, 0010),
the queue's partial indexes (0017, 0019, 0021, 0023) and the flow slots'
trigger (0022); and that unapplying a migration restores what came before it."""

from __future__ import annotations

import time

from django.core.management import call_command
from django.db import connections

from django_bgtasks.db.postgresql import notify
from django_bgtasks.models import BackgroundTask

objects = BackgroundTask.objects

# --- HOT heartbeats (0002) ------------------------------------------------------------


def test_heartbeats_are_hot_updates_on_postgresql(pg_alias: str) -> None:
    """A heartbeat touches no indexed column, so PostgreSQL rewrites the row
    in place (HOT) without writing any index entry."""
    lease = objects.try_claim("beat", "a", ttl=120)
    before = _updates(pg_alias, BackgroundTask._meta.db_table)
    for _ in range(300):
        assert objects.heartbeat("beat", "a", token=lease.token)
    _assert_hot(before, _updates(pg_alias, BackgroundTask._meta.db_table))


def _updates(alias: str, table: str) -> tuple[int, int]:
    """PostgreSQL's count of updates of ``table``, and of HOT ones."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.2)  # a session flushes its counters when it goes idle
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s",
            [table],
        )
        updated, hot = cursor.fetchone()
    return updated, hot


def _assert_hot(before: tuple[int, int], after: tuple[int, int]) -> None:
    """The 300 updates between the two counts were HOT, or nearly all."""
    updated, hot = after[0] - before[0], after[1] - before[1]
    assert updated >= 300
    # An update that touched an indexed column would be no HOT update at
    # all: none of the 300. A few may still miss: HOT needs room on the
    # row's page, and the page is pruned of the earlier versions only once no
    # snapshot of the database still sees them (another session's, under
    # xdist, for a moment), so a burst of 300 can fill it first (299 of 300
    # in a CI rehearsal, 290 in one on a machine loaded three times over).
    assert hot >= updated * 0.8, (hot, updated)


def test_the_fillfactor_leaves_room_for_hot_updates(pg_alias: str) -> None:
    connection = connections[pg_alias]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE relname = %s",
            [BackgroundTask._meta.db_table],
        )
        assert cursor.fetchone()[0] == ["fillfactor=50"]


# --- the queue's partial indexes (0017, 0019, 0021, 0023) ------------------------------


def test_a_queued_tasks_renewals_are_hot_updates_on_postgresql(pg_alias: str) -> None:
    """0017 took ``updated_at`` out of the running rows' index: a renewal of a
    queued task's lease writes no index entry either."""
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    djtasks.add.enqueue(1, 2)
    claim = QueuedTask.objects.claim("w", queues=None)
    assert claim is not None
    before = _updates(pg_alias, QueuedTask._meta.db_table)
    for _ in range(300):
        assert QueuedTask.objects.renew(claim) is False
    _assert_hot(before, _updates(pg_alias, QueuedTask._meta.db_table))


def test_unapplying_0017_restores_the_plain_queue_indexes_and_reapplying_narrows_them(
    pg_alias: str,
) -> None:
    partial = {
        "bgtasks_queued_claim": None,  # 0019 dropped it: the claim reads its queues apart
        "bgtasks_queued_ready": (
            "(queue_name, priority DESC, seq) WHERE ((status)::text = 'READY'::text)"
        ),
        "bgtasks_queued_running": "(owner) WHERE ((status)::text = 'RUNNING'::text)",
        "bgtasks_queued_failed": None,  # 0021 folded it into bgtasks_queued_status
    }
    assert {name: _pg_queue_indexes(pg_alias).get(name) for name in partial} == partial
    assert not any("pattern_ops" in index for index in _pg_queue_indexes(pg_alias).values())
    call_command("migrate", "django_bgtasks", "0016_trace_context", database=pg_alias, verbosity=0)
    try:
        plain = _pg_queue_indexes(pg_alias)
        assert plain["bgtasks_queued_claim"] == "(status, priority DESC, seq)"
        assert plain["bgtasks_queued_running"] == "(status, updated_at)"
        assert "bgtasks_queued_failed" not in plain
        assert any("(active_key varchar_pattern_ops)" in index for index in plain.values())
    finally:
        call_command("migrate", "django_bgtasks", database=pg_alias, verbosity=0)
    assert {name: _pg_queue_indexes(pg_alias).get(name) for name in partial} == partial


def test_unapplying_0019_restores_the_claims_index_across_queues(pg_alias: str) -> None:
    """0019 dropped the index in the claim's order across every queue, which
    let a claim with stale statistics sort a whole queue's ready rows;
    unapplied, it is back as 0017 made it."""
    claim = "(priority DESC, seq) WHERE ((status)::text = 'READY'::text)"
    assert "bgtasks_queued_claim" not in _pg_queue_indexes(pg_alias)
    call_command("migrate", "django_bgtasks", "0018_sqlite_claim_index", database=pg_alias,
                 verbosity=0)  # fmt: skip
    try:
        assert _pg_queue_indexes(pg_alias)["bgtasks_queued_claim"] == claim
    finally:
        call_command("migrate", "django_bgtasks", database=pg_alias, verbosity=0)
    assert "bgtasks_queued_claim" not in _pg_queue_indexes(pg_alias)


# 0021's index of the finished rows, which 0023 replaced by one a status.
FINISHED_BY_STATUS = (
    "(status, seq) WHERE ((status)::text = ANY ((ARRAY['SUCCESSFUL'::character varying,"
    " 'FAILED'::character varying])::text[]))"
)


def test_0021_indexes_a_queues_a_paths_and_a_statuss_tasks_and_unapplied_restores_0017s(
    pg_alias: str,
) -> None:
    """0021's indexes for the operator's reads (the unique constraint on
    ``active_key`` stays: the old release's enqueue names it)."""
    added = {
        "bgtasks_queued_queue": "(queue_name, seq)",
        "bgtasks_queued_task": "(task_path, seq)",
        "bgtasks_queued_status": FINISHED_BY_STATUS,
        "bgtasks_queued_ready_seq": "(seq) WHERE (((status)::text = 'READY'::text) AND (seq > 0))",
        "django_bgtasks_queuedtask_active_key_key": "(active_key)",
        "bgtasks_queued_failed": None,
    }
    call_command("migrate", "django_bgtasks", "0022_flow_slots_made_once", database=pg_alias,
                 verbosity=0)  # fmt: skip
    try:
        assert {name: _pg_queue_indexes(pg_alias).get(name) for name in added} == added
        call_command("migrate", "django_bgtasks", "0020_sqlite_flow_slot_take",
                     database=pg_alias, verbosity=0)  # fmt: skip
        before = _pg_queue_indexes(pg_alias)
        assert before["bgtasks_queued_failed"] == "(seq) WHERE ((status)::text = 'FAILED'::text)"
        assert not set(before) & {name for name in added if name.startswith("bgtasks_queued_")} - {
            "bgtasks_queued_failed"
        }
        call_command("migrate", "django_bgtasks", "0022_flow_slots_made_once",
                     database=pg_alias, verbosity=0)  # fmt: skip
        assert {name: _pg_queue_indexes(pg_alias).get(name) for name in added} == added
    finally:
        call_command("migrate", "django_bgtasks", database=pg_alias, verbosity=0)


def test_0023_indexes_each_finished_status_by_seq_and_unapplied_restores_0021s(
    pg_alias: str,
) -> None:
    """A finished status's rows by ``seq`` alone, each: the order and page
    fetches of the primary key without another status's rows, so that the
    planner reads them there with fresh statistics too (tests/operations/
    test_queued.py); 0021's (status, seq) goes."""
    after = {
        "bgtasks_queued_succeeded_seq": "(seq) WHERE ((status)::text = 'SUCCESSFUL'::text)",
        "bgtasks_queued_failed_seq": "(seq) WHERE ((status)::text = 'FAILED'::text)",
        "bgtasks_queued_status": None,
    }
    assert {name: _pg_queue_indexes(pg_alias).get(name) for name in after} == after
    call_command("migrate", "django_bgtasks", "0022_flow_slots_made_once", database=pg_alias,
                 verbosity=0)  # fmt: skip
    try:
        before = {name: _pg_queue_indexes(pg_alias).get(name) for name in after}
        assert before == dict.fromkeys(after) | {"bgtasks_queued_status": FINISHED_BY_STATUS}
    finally:
        call_command("migrate", "django_bgtasks", database=pg_alias, verbosity=0)
    assert {name: _pg_queue_indexes(pg_alias).get(name) for name in after} == after


def _pg_queue_indexes(alias: str) -> dict[str, str]:
    """Each index of the queue table on PostgreSQL: its columns and predicate."""
    from django_bgtasks.models import QueuedTask

    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
            [QueuedTask._meta.db_table],
        )
        return {name: definition.split(" USING btree ")[1] for name, definition in cursor}


# --- the flow slots' trigger (0022) -----------------------------------------------------


def test_0022_makes_the_slots_once_a_statement_and_unapplied_restores_0013s_trigger(
    pg_alias: str,
) -> None:
    """0022's trigger runs once a statement (over its rows); unapplied, 0013's
    runs once a row; each makes the slots of every key of an enqueue_many."""
    from django_bgtasks.models import FlowSlot
    from tests import dbtools, djtasks

    def enqueue_and_count(prefix: str) -> int:
        """The slots of three new accounts (two each), made by one enqueue_many."""
        backend = djtasks.per_account.get_backend()
        backend.enqueue_many(djtasks.per_account, [((f"{prefix}{n}",), {}) for n in range(3)])
        slots = FlowSlot.objects.using(pg_alias).filter(flow_key__startswith=f"account:{prefix}")
        return slots.count()

    assert _pg_flow_triggers(pg_alias) == {"bgtasks_flow_slots_made": "STATEMENT"}
    assert enqueue_and_count("new") == 3 * 2
    call_command("migrate", "django_bgtasks", "0021_queue_list_indexes", database=pg_alias,
                 verbosity=0)  # fmt: skip
    try:
        assert _pg_flow_triggers(pg_alias) == {"bgtasks_flow_slots_create": "ROW"}
        # (as the release before 0028 enqueues: that table has none of its columns)
        dbtools.enqueue_as_before_0028(
            pg_alias, djtasks.per_account, [(f"old{n}",) for n in range(3)]
        )
        assert (
            FlowSlot.objects.using(pg_alias).filter(flow_key__startswith="account:old").count()
            == 6
        )
    finally:
        call_command("migrate", "django_bgtasks", database=pg_alias, verbosity=0)
    assert _pg_flow_triggers(pg_alias) == {"bgtasks_flow_slots_made": "STATEMENT"}
    assert enqueue_and_count("again") == 3 * 2


def _pg_flow_triggers(alias: str) -> dict[str, str]:
    """The queue table's INSERT triggers that make flow slots, and whether
    each runs once a row or once a statement."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT trigger_name, action_orientation FROM information_schema.triggers"
            " WHERE event_object_table = 'django_bgtasks_queuedtask'"
            " AND event_manipulation = 'INSERT' AND trigger_name LIKE 'bgtasks_flow_slots_%%'"
        )
        return dict(cursor.fetchall())


# --- the change notifications (0008, 0010) ---------------------------------------------


def test_the_change_trigger_watches_every_column_but_the_heartbeats(pg_alias: str) -> None:
    """0008's update trigger names its columns (UPDATE OF ...), so that a
    heartbeat never fires it: a column added to the table must be added
    there too, or its changes would go unannounced."""
    table = BackgroundTask._meta.db_table
    with connections[pg_alias].cursor() as cursor:
        cursor.execute(
            """
            SELECT attribute.attname FROM pg_trigger t
            JOIN pg_attribute attribute
                ON attribute.attrelid = t.tgrelid AND attribute.attnum = ANY(t.tgattr)
            WHERE t.tgname = 'bgtasks_notify_update'
            """
        )
        watched = {row[0] for row in cursor.fetchall()}
    columns = {field.column for field in BackgroundTask._meta.concrete_fields}
    # trace_context (0016) changes only with requested_at, in request_run's
    # statement: that change is announced.
    assert watched == columns - {"updated_at", "trace_context"}, table


def test_a_heartbeat_notifies_nobody_and_an_update_does(pg_direct_alias: str) -> None:
    import psycopg

    objects = BackgroundTask.objects
    lease = objects.try_claim("announced", "a", ttl=30)
    assert lease is not None
    params = connections[pg_direct_alias].get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute("LISTEN bgtasks_changes")
        assert objects.heartbeat("announced", "a", token=lease.token)
        assert list(listener.notifies(timeout=0.5)) == []
        assert objects.update_state("announced", "a", {"n": 1}, token=lease.token)
        [notification] = list(listener.notifies(timeout=2, stop_after=1))
    assert '"announced"' in notification.payload


def test_a_django_task_becoming_ready_notifies_its_queue_and_a_claim_does_not(
    pg_direct_alias: str,
) -> None:
    """0010's trigger: an enqueue (on commit) announces the queue; the claim,
    which makes it RUNNING, and the finish announce nothing."""
    import json

    import psycopg

    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    params = connections[pg_direct_alias].get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(notify.LISTEN_QUEUE)
        djtasks.add.enqueue(1, 2)
        [notification] = list(listener.notifies(timeout=2, stop_after=1))
        assert notification.channel == notify.QUEUE_CHANNEL
        assert json.loads(notification.payload) == {"queue": "default"}
        claim = QueuedTask.objects.claim("test", queues=None)
        assert claim is not None
        execute(claim)
        assert list(listener.notifies(timeout=0.5)) == []


# --- fair shares (0028) ----------------------------------------------------------------


def test_0028s_indexes_are_written_with_the_claims_own_expressions() -> None:
    """The claim finds the keyed and the unkeyed ready tasks only through
    0028's indexes, which PostgreSQL uses only for a query that writes their
    expressions as they are: the claim's READY_KEY and READY_UNKEYED are
    those of the migration's DDL, to the letter."""
    from django_bgtasks.choices import QueueStatus
    from django_bgtasks.db.postgresql import queue, schema

    fair, unkeyed = (
        step for step in schema.SCHEMA["0028_fair_shares"].forwards if "CREATE INDEX" in step
    )
    ready_key, ready_unkeyed = (
        expression.format(ready=QueueStatus.READY.value)
        for expression in (queue.READY_KEY, queue.READY_UNKEYED)
    )
    assert fair.count(ready_key) == 2, fair
    assert unkeyed.count(ready_unkeyed) == 1, unkeyed
    assert queue._T_KEY in queue.QUEUE.claim and queue._READY_UNKEYED in queue.QUEUE.claim
