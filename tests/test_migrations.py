"""What the migrations set up per vendor, tested by what it does: the history
triggers (0002 on SQLite, 0003 on PostgreSQL, 0006 on MySQL/MariaDB), the
fillfactor, the cost of a heartbeat, MySQL's binary name collation, and
PostgreSQL's notifications (0008 for leases, 0010 for the Django Tasks queue);
and that the SQL a released migration ran (db/<engine>/schema.py) never changes."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections

import django_bgtasks
from django_bgtasks.core import store
from django_bgtasks.db.driver import Steps
from django_bgtasks.db.mysql.schema import SCHEMA as MYSQL_SCHEMA
from django_bgtasks.db.postgresql import notify
from django_bgtasks.db.postgresql.schema import SCHEMA as POSTGRESQL_SCHEMA
from django_bgtasks.db.shared import Statements
from django_bgtasks.db.sqlite.schema import SCHEMA as SQLITE_SCHEMA
from django_bgtasks.models import BackgroundTask, TaskRun
from tests.dbtools import backdate

objects = BackgroundTask.objects


def statements(alias: str) -> tuple[Statements, str]:
    """The lease statements for ``alias``, and how they write a history row."""
    connection = connections[alias]
    rendered = store.statements(connection)
    return rendered, f"INSERT INTO {connection.ops.quote_name(TaskRun._meta.db_table)}"


def history(name: str) -> list[dict[str, Any]]:
    return list(TaskRun.objects.for_task(name).order_by("token").values())


# --- the takeover trigger (both vendors) ---------------------------------------------


def test_a_takeover_of_a_stale_lease_records_the_replaced_run_as_lost(db_alias: str) -> None:
    claim, writes_history = statements(db_alias)
    # The claim is a plain upsert: only the trigger can record what it replaced.
    assert writes_history not in claim.claim

    old = objects.try_claim("job", "old-holder", {"done": 1}, ttl=0.5)
    assert old is not None
    time.sleep(0.05)
    assert objects.update_state("job", "old-holder", {"done": 4}, token=old.token)
    time.sleep(0.7)  # past the ttl, with no heartbeat since
    silent = objects.get_state("job")
    assert silent.stale and history("job") == []

    new = objects.try_claim("job", "new-holder", ttl=30)
    assert new is not None and new.token == old.token + 1
    [lost] = history("job")
    assert (lost["token"], lost["owner"], lost["outcome"], lost["value"]) == (
        old.token,
        "old-holder",
        "lost",
        {"done": 4},
    )
    assert lost["error"] == "lease expired; taken over by new-holder"
    assert lost["started_at"] == silent.started_at < silent.updated_at
    assert lost["finished_at"] == silent.updated_at  # as of its last heartbeat
    # The new holder's run is not history yet, and the old holder is fenced off.
    assert objects.get_state("job").token == new.token
    assert not objects.heartbeat("job", "old-holder", token=old.token)


def test_a_claim_that_replaces_no_running_lease_records_nothing(db_alias: str) -> None:
    first = objects.try_claim("job", "a", ttl=30)
    assert objects.try_claim("job", "b", ttl=30) is None  # refused: nothing replaced
    assert history("job") == []
    assert objects.release("job", "a", token=first.token)
    assert objects.try_claim("job", "b", ttl=30) is not None  # an idle row
    assert [(run["token"], run["outcome"]) for run in history("job")] == [
        (first.token, "succeeded")
    ]


# --- the run-history trigger (SQLite, MySQL) -------------------------------------------

ENDINGS = ["release", "force_release", "expire_stale"]


@pytest.mark.parametrize("ending", ENDINGS)
def test_on_sqlite_the_trigger_records_every_run_that_ends(sqlite_alias: str, ending: str) -> None:
    _the_trigger_records_the_run(sqlite_alias, ending)


@pytest.mark.parametrize("ending", ENDINGS)
def test_on_mysql_the_trigger_records_every_run_that_ends(mysql_alias: str, ending: str) -> None:
    _the_trigger_records_the_run(mysql_alias, ending)


def _the_trigger_records_the_run(alias: str, ending: str) -> None:
    rendered, writes_history = statements(alias)
    # SQLite and MySQL have no data-modifying CTEs: the statement that ends a
    # run writes no history row itself, the trigger (0002-0005; 0006) does.
    assert writes_history not in getattr(rendered, ending)

    claim = objects.try_claim("job", "a", {"done": 1}, ttl=30)
    assert objects.update_state("job", "a", {"done": 3}, token=claim.token)
    value, result = {"done": 3}, None
    if ending == "release":
        assert objects.release(
            "job", "a", {"done": 9}, token=claim.token, outcome="failed", error="boom", result=[7]
        )
        outcome, error, value, result = "failed", "boom", {"done": 9}, [7]
    elif ending == "force_release":
        assert objects.force_release("job", token=claim.token)
        outcome, error = "released-by-operator", "released by an operator"
    else:
        backdate(alias, "job", 31)  # its holder went silent
        assert objects.expire_stale() == 1
        outcome, error = "lost", "lease expired: no heartbeat within the ttl"

    state = objects.get_state("job")
    [run] = history("job")
    assert (run["token"], run["owner"], run["outcome"], run["error"], run["value"]) == (
        claim.token,
        "a",
        outcome,
        error,
        value,
    )
    assert (run["started_at"], run["finished_at"]) == (state.started_at, state.finished_at)
    assert (run["result"], run["result_note"]) == (result, "")  # the columns of 0005
    if ending == "expire_stale":
        assert run["finished_at"] == state.updated_at  # as of its last heartbeat


# --- migration 0005: the results -------------------------------------------------------


def test_a_takeover_copies_the_replaced_runs_result_columns(db_alias: str) -> None:
    """The takeover triggers (0005's) copy every history column, the result's
    too. A running row has none (a claim clears it), so set one by hand."""
    old = objects.try_claim("job", "old-holder", ttl=30)
    connection = connections[db_alias]
    table = connection.ops.quote_name(BackgroundTask._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET result = %s, result_note = %s WHERE name = %s",
            ['{"partial": 1}', "a note", "job"],
        )
    backdate(db_alias, "job", 31)
    assert objects.try_claim("job", "new-holder", ttl=30) is not None
    [lost] = history("job")
    assert (lost["token"], lost["outcome"]) == (old.token, "lost")
    assert (lost["result"], lost["result_note"]) == ({"partial": 1}, "a note")
    state = objects.get_state("job")
    assert (state.result, state.result_note) == (None, "")  # the new run starts without


def _history_sql(alias: str) -> str:
    """The SQL of what writes history from a trigger: SQLite's trigger, or
    PostgreSQL's takeover function."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = %s",
                ["bgtasks_record_run"],
            )
        elif connection.vendor == "mysql":
            cursor.execute(
                "SELECT action_statement FROM information_schema.triggers"
                " WHERE trigger_schema = DATABASE() AND trigger_name = %s",
                ["bgtasks_record_run"],
            )
            found = cursor.fetchall()
            if not found:
                return ""
        else:
            cursor.execute(
                "SELECT prosrc FROM pg_proc WHERE proname = %s", ["bgtasks_record_takeover"]
            )
        if connection.vendor != "mysql":
            found = cursor.fetchall()
    assert len(found) == 1, found
    return str(found[0][0])


def test_unapplying_0005_leaves_0004s_history_trigger_and_reapplying_restores_0005s(
    db_alias: str,
) -> None:
    assert "result_note" in _history_sql(db_alias)
    call_command("migrate", "django_bgtasks", "0004_workers", database=db_alias, verbosity=0)
    try:
        at_0004 = _history_sql(db_alias)
        if connections[db_alias].vendor == "mysql":
            # MySQL's trigger came with 0006 (after 0005's columns): gone with it.
            assert at_0004 == ""
        else:  # still there, so runs are still recorded
            assert "scheduled_for" in at_0004 and "result" not in at_0004
    finally:
        call_command("migrate", "django_bgtasks", database=db_alias, verbosity=0)
    assert "result_note" in _history_sql(db_alias)
    # And it works: a release records the run with its result.
    lease = objects.try_claim("job", "a", ttl=30)
    assert objects.release("job", "a", token=lease.token, result={"ok": True})
    assert [run["result"] for run in history("job")] == [{"ok": True}]


# --- PostgreSQL: HOT heartbeats ------------------------------------------------------


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


# --- PostgreSQL: the queue's partial indexes (0017) -----------------------------------


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


def test_0021_indexes_the_operators_reads_on_mysql(
    mysql_alias: str,
) -> None:
    indexes = _queue_indexes(mysql_alias)
    assert [column for column, _order in indexes["bgtasks_queued_queue"]] == ["queue_name", "seq"]
    assert [column for column, _order in indexes["bgtasks_queued_task"]] == ["task_path", "seq"]
    assert [column for column, _order in indexes["bgtasks_queued_status"]] == ["status", "seq"]


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


def test_0022_makes_the_slots_once_a_statement_and_unapplied_restores_0013s_trigger(
    pg_alias: str,
) -> None:
    """0022's trigger runs once a statement (over its rows); unapplied, 0013's
    runs once a row; each makes the slots of every key of an enqueue_many."""
    from django_bgtasks.models import FlowSlot
    from tests import djtasks

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
        assert enqueue_and_count("old") == 3 * 2
    finally:
        call_command("migrate", "django_bgtasks", database=pg_alias, verbosity=0)
    assert _pg_flow_triggers(pg_alias) == {"bgtasks_flow_slots_made": "STATEMENT"}
    assert enqueue_and_count("again") == 3 * 2


def test_0022_on_sqlite_makes_the_slots_only_when_a_key_lacks_them_and_unapplied_restores_0013s(
    sqlite_alias: str,
) -> None:
    """SQLite's trigger asks for slot N before its body builds the slots."""
    from django_bgtasks.models import FlowSlot
    from tests import djtasks

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
        assert enqueue_and_count("old") == 3 * 2
    finally:
        call_command("migrate", "django_bgtasks", database=sqlite_alias, verbosity=0)
    assert "NOT EXISTS" in trigger_condition()
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


def _pg_queue_indexes(alias: str) -> dict[str, str]:
    """Each index of the queue table on PostgreSQL: its columns and predicate."""
    from django_bgtasks.models import QueuedTask

    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
            [QueuedTask._meta.db_table],
        )
        return {name: definition.split(" USING btree ")[1] for name, definition in cursor}


# --- MySQL / MariaDB: names compare byte for byte (0006) --------------------------------


def test_on_mysql_names_that_differ_in_case_or_accents_are_different_tasks(
    mysql_alias: str,
) -> None:
    """MySQL's default collations would make these one primary key; 0006
    gives the name columns utf8mb4_bin, so they compare as on PostgreSQL."""
    names = ["log-cleanup", "Log-Cleanup", "log-cleanüp", "log-cleanup.", "LOG-CLEANUP"]
    leases = [objects.try_claim(name, "a", ttl=30) for name in names]
    assert all(lease is not None and lease.token == 1 for lease in leases)
    assert [state.name for state in objects.list_states()] == sorted(names)
    for name, lease in zip(names, leases, strict=True):
        assert objects.release(name, "a", token=lease.token)
    assert sorted(run["name"] for run in TaskRun.objects.using(mysql_alias).values()) == sorted(
        names
    )
    with connections[mysql_alias].cursor() as cursor:
        cursor.execute(
            "SELECT table_name, collation_name FROM information_schema.columns"
            " WHERE table_schema = DATABASE() AND column_name = 'name'"
            " AND table_name IN (%s, %s) ORDER BY table_name",
            [BackgroundTask._meta.db_table, TaskRun._meta.db_table],
        )
        assert [collation for _, collation in cursor.fetchall()] == ["utf8mb4_bin"] * 2


def test_on_mysql_a_name_of_200_four_byte_characters_fits(mysql_alias: str) -> None:
    name = "\N{SNAKE}" * 200  # 800 bytes of utf8mb4: inside InnoDB's key limit
    lease = objects.try_claim(name, "a", ttl=30)
    assert lease is not None
    assert objects.get_state(name).name == name
    assert objects.release(name, "a", token=lease.token)
    assert [run["name"] for run in history(name)] == [name]


def test_unapplying_0006_on_mysql_removes_its_trigger_and_reapplying_restores_it(
    mysql_alias: str,
) -> None:
    call_command("migrate", "django_bgtasks", "0005_results", database=mysql_alias, verbosity=0)
    try:
        assert _history_sql(mysql_alias) == ""
    finally:
        call_command("migrate", "django_bgtasks", database=mysql_alias, verbosity=0)
    assert "result_note" in _history_sql(mysql_alias)
    lease = objects.try_claim("job", "a", ttl=30)
    assert objects.release("job", "a", token=lease.token)
    assert [run["outcome"] for run in history("job")] == ["succeeded"]


# --- MySQL / MariaDB: the queue's unique keys and the claim's index (0012) ----------------


def _queue_indexes(alias: str) -> dict[str, list[tuple[str, str]]]:
    """Each index of the queue table: its columns, in order, with their direction."""
    from django_bgtasks.models import QueuedTask

    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT index_name, column_name, collation FROM information_schema.statistics"
            " WHERE table_schema = DATABASE() AND table_name = %s"
            " ORDER BY index_name, seq_in_index",
            [QueuedTask._meta.db_table],
        )
        indexes: dict[str, list[tuple[str, str]]] = {}
        for index, column, direction in cursor.fetchall():
            indexes.setdefault(index, []).append((column, direction))
        return indexes


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


def test_on_mysql_unique_keys_that_differ_in_case_are_different_keys(mysql_alias: str) -> None:
    """MySQL's default collations would make these one key of the unique index
    on active_key; 0012 compares them byte for byte, as on PostgreSQL."""
    import dataclasses

    from tests import djtasks

    # (Not "report ": utf8mb4_bin ignores trailing spaces, docs/install.md.)
    keys = ["report", "Report", "répórt", "REPORT"]
    results = [dataclasses.replace(djtasks.nightly_report, lease_name=k).enqueue() for k in keys]
    assert len({result.id for result in results}) == len(keys)
    again = dataclasses.replace(djtasks.nightly_report, lease_name="Report").enqueue()
    assert again.id == results[1].id


def test_unapplying_0012_on_mysql_removes_the_claims_index_and_reapplying_restores_it(
    mysql_alias: str,
) -> None:
    claim_order = [("status", "A"), ("priority", "D"), ("seq", "A")]
    assert _queue_indexes(mysql_alias)["bgtasks_queued_claim"] == claim_order
    call_command("migrate", "django_bgtasks", "0011_worker_ttl", database=mysql_alias, verbosity=0)
    try:
        assert "bgtasks_queued_claim" not in _queue_indexes(mysql_alias)
    finally:
        call_command("migrate", "django_bgtasks", database=mysql_alias, verbosity=0)
    assert _queue_indexes(mysql_alias)["bgtasks_queued_claim"] == claim_order


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


# --- the SQL of a released migration never changes (db/<engine>/schema.py) -------------

# Each engine's schema entry, by the first 16 hex digits of the sha256 of its
# text (released_sql()), as its migration was released. A database migrated
# with an entry has what it said: an edit would give a database migrated
# later something else. A new migration's entries are pinned here as it is
# written; a pin is never changed.
RELEASED_SQL = {
    "postgresql": {
        "0002_lease_storage": "918ebff4a61f87f4",
        "0003_postgresql_takeover_trigger": "1e887bccf5ab973c",
        "0004_workers": "4f9d2bfc6b8ae9b4",
        "0005_results": "424f83de567a4c59",
        "0008_postgresql_change_notifications": "cd0c99b3642148a3",
        "0009_postgresql_no_pattern_index": "8894047983fcce64",
        "0010_postgresql_queue_notifications": "def247a281b97546",
        "0013_flow_limits": "b08fa46983901db1",
        "0015_pause": "37772104e1edf3a8",
        "0017_postgresql_partial_queue_indexes": "4ece1fe4eac1c6d3",
        "0019_postgresql_claim_by_queue": "ce786887b4a9afc6",
        "0021_queue_list_indexes": "cb6be53eee3b4b82",
        "0022_flow_slots_made_once": "b0af7fabebd2098d",
        "0023_postgresql_finished_by_status": "55b7417a348db418",
        "0025_postgresql_running_by_seq": "25f1c962ac5b5b52",
        "0027_finished_by_time": "29d93a3e87a14528",
    },
    "mysql": {
        "0006_mysql_storage": "5bc8bf5bef5c0f28",
        "0012_mysql_queue": "78614fb018b9eed1",
        "0013_flow_limits": "c5d3981ea3b7e431",
        "0015_pause:paused_queue": "ac539044938f2d3e",
        "0021_queue_list_indexes": "2cecacad02ce3f95",
        "0027_finished_by_time": "55abfa350287501a",
    },
    "sqlite": {
        "0002_lease_storage": "318eba2776172f02",
        "0004_workers": "254cbb2d1b8ccb8c",
        "0005_results": "61b634327c8a99c2",
        "0005_results:restore_0004": "9ce71086c60841f0",
        "0013_flow_limits": "a575cf68952382cc",
        "0015_pause:restore_0005": "678d3bac38ffc2cb",
        "0015_pause": "61b634327c8a99c2",  # 0005's trigger again, word for word
        "0018_sqlite_claim_index": "605e6055e53b1a43",
        "0020_sqlite_flow_slot_take": "76bba89b13869e4f",
        "0021_queue_list_indexes": "8cd8166d3b35b779",
        "0022_flow_slots_made_once": "19f94670be70450b",
        "0027_finished_by_time": "5d4dfa49f1cbc0b0",
    },
}
SCHEMAS = {"postgresql": POSTGRESQL_SCHEMA, "mysql": MYSQL_SCHEMA, "sqlite": SQLITE_SCHEMA}


def released_sql(steps: Steps) -> str:
    """What pins an entry: its statements forwards and backwards, in order,
    and its query of the pattern indexes."""
    parts = [*steps.forwards, "-- backwards", *steps.backwards, "-- pattern indexes"]
    text = "\n".join([*parts, steps.pattern_indexes])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def edited(pinned: dict[str, str], schema: Mapping[str, Steps]) -> list[str]:
    """The entries of ``schema`` whose text is no longer the one ``pinned``."""
    return sorted(
        step for step in pinned if step not in schema or pinned[step] != released_sql(schema[step])
    )


@pytest.mark.parametrize("vendor", sorted(SCHEMAS))
def test_the_sql_of_a_released_migration_is_never_edited(vendor: str) -> None:
    schema, pinned = SCHEMAS[vendor], RELEASED_SQL[vendor]
    changed = edited(pinned, schema)
    assert changed == [], (
        f"a released migration's SQL changed: add a new migration instead "
        f"({vendor}: {changed}, in django_bgtasks/db/{vendor}/schema.py)"
    )
    unpinned = sorted(set(schema) - set(pinned))
    assert unpinned == [], (
        f"{vendor}'s schema entries {unpinned} are not pinned: add their hashes to "
        "RELEASED_SQL as their migration is written"
    )
    migrations = {
        path.stem for path in (Path(django_bgtasks.__file__).parent / "migrations").glob("0*.py")
    }
    strays = sorted(step for step in schema if step.partition(":")[0] not in migrations)
    assert strays == [], f"{vendor}'s schema entries of no migration: {strays}"


def test_an_edit_of_a_released_entry_is_caught() -> None:
    entry = SQLITE_SCHEMA["0018_sqlite_claim_index"]
    respaced = Steps(forwards=[entry.forwards[0] + " "], backwards=entry.backwards)
    assert edited(RELEASED_SQL["sqlite"], {**SQLITE_SCHEMA}) == []
    assert edited(
        RELEASED_SQL["sqlite"], {**SQLITE_SCHEMA, "0018_sqlite_claim_index": respaced}
    ) == ["0018_sqlite_claim_index"]
    # An entry taken away is an edit too.
    assert edited(RELEASED_SQL["sqlite"], {}) == sorted(RELEASED_SQL["sqlite"])
