"""db/mysql/queue.py on MariaDB/MySQL: what its way of running the queue's
statements adds to the rules every engine's tests check (tests/queue/,
tests/faults/test_backend_workers.py). A claim of several rows, and
``finish_many``, run through db/engines.py here, as the queue's manager will
run them; a claim skips only the rows another claim holds; an error inside a
statement's transaction leaves none open; each one alike with the steps in
one query (mysqlclient's default) and one query a step."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_bgtasks.db import engines
from django_bgtasks.db.mysql import leases as mysql
from django_bgtasks.db.mysql import routines as mariadb_routines
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import with_queues
from django_bgtasks.models import FlowSlot, QueuedTask
from django_bgtasks.queue.manager import Ending
from tests import djtasks

TABLE = QueuedTask._meta.db_table


@pytest.fixture(
    params=[
        ("mariadb", True, True),
        ("mariadb", True, False),
        ("mysql", True, False),
        ("mysql", False, False),
    ],
    ids=["mariadb", "mariadb-as-text", "mysql-one-round-trip", "mysql-multi-statements-off"],
)
def mysql_queue_alias(
    request: pytest.FixtureRequest, mysql_alias: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The MariaDB alias, its connection with or without several statements
    per query; as MariaDB, its claims and ends as procedures
    (db/mysql/routines.py) or as text (where a procedure can't be had), or
    taken for MySQL (the statements MySQL runs where they differ: MariaDB
    runs them too)."""
    dialect, multi, routines = request.param
    connection = connections[mysql_alias]
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    if not multi:
        options["multi_statements"] = False
    if dialect == "mariadb" and not routines:
        refused = {mariadb_routines._database(connection)}
        monkeypatch.setattr(mariadb_routines, "_REFUSED", refused)
    try:
        connection.ensure_connection()
        if dialect == "mariadb" and not connection.mysql_is_mariadb:
            pytest.skip("BGTASKS_MYSQL_URL is MySQL: MariaDB's statements can't run there")
        if dialect == "mysql":
            connection.mysql_is_mariadb = False  # (Django's cached_property)
        assert mysql.multi_statements(connection) is multi
        with CaptureQueriesContext(connection) as queries:
            yield mysql_alias
        # Claims and ends sent one way only: their CALLs, or their text (a
        # claim's pick reads this index; MariaDB keeps the ends in this
        # variable). A recovery and a give-back are text either way.
        sent = [q["sql"] for q in queries.captured_queries if "CREATE PROCEDURE" not in q["sql"]]
        text = ("FORCE INDEX (bgtasks_queued_claim)", "SET @bgtasks_ends")
        other_way = text if routines else ("CALL bgtasks_",)
        assert not [sql for sql in sent if any(mark in sql for mark in other_way)]
    finally:
        options.pop("multi_statements", None)
        vars(connection).pop("mysql_is_mariadb", None)
        connection.close()


def _run(alias: str, statement: str, **params: Any) -> list[Row]:
    connection = connections[alias]
    query = getattr(
        engines.queue_statements(connection, table=TABLE, paused="django_bgtasks_pausedqueue"),
        statement,
    )
    return engines.run(connection, statement, query, params, queue=True)


def _claim(alias: str, limit: int, owner: str = "w1") -> list[Row]:
    """The rows a claim took, in the manager's order (the statement's read has none)."""
    rows = _run(alias, "claim", owner=owner, all=True, queues="[]", limit=limit)
    return sorted(rows, key=lambda row: (-row["priority"], row["seq"]))


def _enqueue(*priorities: int) -> list[str]:
    return [str(djtasks.add.using(priority=p).enqueue(p, 1).id) for p in priorities]


def test_a_claim_takes_up_to_limit_rows_in_order_each_with_its_own_token_and_attempt(
    mysql_queue_alias: str,
) -> None:
    ids = _enqueue(0, 5, 0, 9, -1)
    first = _claim(mysql_queue_alias, 3)
    assert [row["priority"] for row in first] == [9, 5, 0]
    assert str(uuid.UUID(first[2]["uuid"])) == ids[0], "of equal priorities, the first enqueued"
    assert {(row["token"], row["attempts"]) for row in first} == {(1, 1)}
    rows = QueuedTask.objects.using(mysql_queue_alias)
    assert rows.running().filter(owner="w1").count() == 3
    assert {str(uuid) for uuid in rows.ready().values_list("uuid", flat=True)} == {
        ids[2],
        ids[4],
    }
    assert [row["priority"] for row in _claim(mysql_queue_alias, 3, owner="w2")] == [0, -1]
    assert _claim(mysql_queue_alias, 3) == []
    assert [r.worker_ids for r in rows.order_by("seq")] == [["w1"], ["w1"], ["w2"], ["w1"], ["w2"]]


def test_a_claim_skips_only_the_rows_another_claim_holds(mysql_alias: str) -> None:
    """Another claim in flight (its step 1, rows locked, not committed) holds
    its rows alone: this claim takes the next ones at once. Without migration
    0012's index the other claim's sort would have locked every ready row, and
    this one would take none."""
    _enqueue(3, 2, 1, 0)
    other = connections.create_connection(mysql_alias)
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            claim = engines.queue_statements(
                other, table=TABLE, paused="django_bgtasks_pausedqueue"
            ).claim
            pick = with_queues(claim, None).split(mysql.MYSQL_STEP)[0]
            cursor.execute(pick, {"all": True, "queues": "[]", "limit": 1})
            cursor.execute("SELECT @bgtasks_picked")
            [(picked,)] = cursor.fetchall()
        top = QueuedTask.objects.using(mysql_alias).get(priority=3).seq
        assert json.loads(picked) == [top]
        assert [row["priority"] for row in _claim(mysql_alias, 2)] == [2, 1]
    finally:
        other.rollback()
        other.close()
    assert [row["priority"] for row in _claim(mysql_alias, 2)] == [3, 0]


def test_the_writes_of_several_rows_wait_on_no_row_they_dont_write(mysql_alias: str) -> None:
    """Another session holds the lock of a row that a claim, a recovery and a
    give-back don't take: each still writes its own rows at once (they look
    their rows up by key, and don't read the table through, waiting on that
    lock until the lock wait timeout)."""
    _enqueue(2, 1, 0)
    rows = QueuedTask.objects.using(mysql_alias)
    locked = rows.get(priority=0).seq
    connection = connections[mysql_alias]
    other = connections.create_connection(mysql_alias)
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute(f"SELECT seq FROM {TABLE} WHERE seq = %s FOR UPDATE", [locked])
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
        assert [row["priority"] for row in _claim(mysql_alias, 1)] == [2]
        rows.filter(priority=2).update(updated_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
        assert [row["status"] for row in _run(mysql_alias, "recover")] == ["FAILED"]
        assert [row["priority"] for row in _claim(mysql_alias, 1)] == [1]
        assert len(_run(mysql_alias, "give_back", owner="w1", held="[]")) == 1
    finally:
        other.rollback()
        other.close()
        connection.close()  # (and its session's lock wait timeout)
    assert [row.status for row in rows.order_by("-priority")] == ["FAILED", "READY", "READY"]


def test_a_recovery_in_flight_holds_back_no_live_leases_heartbeat(mysql_alias: str) -> None:
    """A recovery whose transaction is still open after its pick (a slow
    client; with ``multi_statements`` off each step is its own round trip)
    holds the locks of the stale rows alone: a live lease's heartbeat is
    written at once, not after that recovery ends. The recovery reads every
    running row to find the stale ones (the ttl is in no index); had it
    read them with a lock, InnoDB would keep each live row's till its end,
    and the heartbeat would wait for it, past its lease's ttl."""
    _enqueue(1, 0)
    stale, live = QueuedTask.objects.claim_many("w1", queues=None, limit=2)
    rows = QueuedTask.objects.using(mysql_alias)
    rows.filter(seq=stale.seq).update(updated_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    connection = connections[mysql_alias]
    other = connections.create_connection(mysql_alias)
    try:
        other.set_autocommit(False)
        recover = engines.queue_statements(other, table=TABLE, paused="django_bgtasks_pausedqueue")
        *pick, _update, _read = recover.recover.split(mysql.MYSQL_STEP)
        with other.cursor() as cursor:
            for step in pick:
                cursor.execute(step, {})
            cursor.execute("SELECT @bgtasks_picked")
            [(picked,)] = cursor.fetchall()
        assert json.loads(picked) == [stale.seq]
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
        # Renewed, no cancel requested (a lock wait would time out: OperationalError).
        assert QueuedTask.objects.renew(live) is False
    finally:
        other.rollback()
        other.close()
        connection.close()  # (and its session's lock wait timeout)
    # The whole recovery: the stale run ended (its one attempt lost), the live one held still.
    assert [row["status"] for row in _run(mysql_alias, "recover")] == ["FAILED"]
    after = rows.get(seq=live.seq)
    assert (after.status, after.owner, after.token) == ("RUNNING", "w1", live.token)
    assert rows.get(seq=stale.seq).status == "FAILED"


def test_on_mariadb_a_claim_runs_its_flow_steps_only_for_a_row_with_a_limit(
    mysql_queue_alias: str,
) -> None:
    """MariaDB runs the claim's flow steps (the first keeps the free slots in
    @bgtasks_cslots) only when a picked row has a flow limit; MySQL, which
    has no compound statement outside stored programs, runs them always.
    Either way the rows are claimed, and the limited one takes its slot."""
    connection = connections[mysql_queue_alias]

    def slots_read() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT @bgtasks_cslots = 'untouched'")
            [(untouched,)] = cursor.fetchall()
            cursor.execute("SET @bgtasks_cslots = 'untouched'")
        return not untouched

    _enqueue(0)
    slots_read()
    assert len(_claim(mysql_queue_alias, 1)) == 1
    assert slots_read() is (not connection.mysql_is_mariadb)
    djtasks.per_account.enqueue("a")
    assert [json.loads(row["args_kwargs"])["args"] for row in _claim(mysql_queue_alias, 1)] == [
        ["a"]
    ]
    assert slots_read() is True
    taken = FlowSlot.objects.using(mysql_queue_alias).filter(seq__isnull=False)
    assert list(taken.values_list("flow_key", flat=True)) == ["account:a"]


def test_finish_many_writes_each_row_its_ending_fences_and_no_other(
    mysql_queue_alias: str,
) -> None:
    _enqueue(5, 4, 3, 2, 1, 0)
    claimed = {row["priority"]: row for row in _claim(mysql_queue_alias, 6)}
    rows = QueuedTask.objects.using(mysql_queue_alias)
    rows.filter(seq=claimed[0]["seq"]).update(active_key="unique-0")
    stale = claimed[1]["seq"]
    rows.filter(seq=stale).update(updated_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    error = {"exception_class_path": "builtins.ValueError", "traceback": "ValueError: x"}

    def end(priority: int, status: str, **changes: Any) -> dict[str, Any]:
        row = claimed[priority]
        return {
            "seq": row["seq"],
            "owner": "w1",
            "token": row["token"],
            "status": status,
            "return_value": None,
            "error": None,
            "refund": 0,
            **changes,
        }

    ends = [
        end(5, "SUCCESSFUL", return_value=json.dumps({"a": [1, "é"]})),
        end(4, "FAILED", error=error),
        end(3, "READY", error=error, refund=1),
        end(2, "SUCCESSFUL", token=claimed[2]["token"] + 1),  # a stale holder's token
        end(1, "SUCCESSFUL"),  # its lease is no longer live
        end(0, "READY", owner="W1"),  # another owner (compared byte for byte)
    ]
    written = _run(mysql_queue_alias, "finish_many", ends=json.dumps(ends))
    by_seq = {row["seq"]: row for row in written}
    assert set(by_seq) == {claimed[p]["seq"] for p in (5, 4, 3)}
    assert [by_seq[claimed[p]["seq"]]["status"] for p in (5, 4, 3)] == [
        "SUCCESSFUL",
        "FAILED",
        "READY",
    ]
    assert by_seq[claimed[3]["seq"]]["finished_at"] is None
    assert by_seq[claimed[5]["seq"]]["finished_at"] is not None
    after = {row.priority: row for row in rows.all()}
    assert after[5].return_value == {"a": [1, "é"]} and after[5].errors == []
    assert (after[4].status, after[4].errors, after[4].active_key) == ("FAILED", [error], None)
    assert (after[3].status, after[3].errors, after[3].attempts) == ("READY", [error], 0)
    assert [after[p].status for p in (2, 1, 0)] == ["RUNNING"] * 3
    assert after[0].active_key == "unique-0"
    assert _run(mysql_queue_alias, "finish_many", ends=json.dumps(ends[:3])) == []


def test_on_mariadb_the_writes_of_picked_rows_keep_no_temporary_table_on_disk(
    mysql_alias: str,
) -> None:
    """MariaDB keeps an internal temporary table on disk when it holds a BLOB:
    the new values of a multi-table UPDATE whose first table is not the one
    it writes, the rows of a sorted read. Each claim and each end made and
    deleted such a file, a quarter of the server's CPU in a drain
    (docs/benchmarks.md, "MariaDB: no file a claim"). So a claim, an end, a
    give-back and a recovery, each writing rows with BLOBs, make none."""
    connection = connections[mysql_alias]
    connection.ensure_connection()
    if not connection.mysql_is_mariadb:
        pytest.skip("BGTASKS_MYSQL_URL is MySQL, whose temporary tables of BLOBs stay in memory")

    def on_disk() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'")
            [(_name, count)] = cursor.fetchall()
        return int(count)

    _enqueue(3, 2, 1)
    before = on_disk()
    claimed = _claim(mysql_alias, 3)
    ends = [
        {"seq": row["seq"], "owner": "w1", "token": row["token"], "status": "SUCCESSFUL",
         "return_value": json.dumps({"rows": "x" * 100}), "error": None, "refund": 0}
        for row in claimed[:2]
    ]  # fmt: skip
    assert len(_run(mysql_alias, "finish_many", ends=json.dumps(ends))) == 2
    assert len(_run(mysql_alias, "give_back", owner="w1", held="[]")) == 1
    [again] = _claim(mysql_alias, 1)
    rows = QueuedTask.objects.using(mysql_alias)
    rows.filter(seq=again["seq"]).update(updated_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert [row["status"] for row in _run(mysql_alias, "recover")] == ["FAILED"]  # 1 attempt
    assert on_disk() == before
    after = {row.priority: row for row in rows.all()}
    assert [after[p].return_value for p in (3, 2)] == [{"rows": "x" * 100}] * 2
    given_back_then_lost = (after[1].status, after[1].worker_ids, after[1].attempts)
    assert given_back_then_lost == ("FAILED", ["w1"], 1)
    assert after[1].errors[0]["exception_class_path"].endswith("LeaseLost")


@pytest.mark.parametrize("write", ["finish", "finish_and_claim"])
def test_an_error_inside_a_statements_transaction_leaves_none_open(
    mysql_alias: str, write: str
) -> None:
    """A finish, or a round's ends and claim (on MariaDB, the CALLs of their
    procedures: db/mysql/routines.py), that times out waiting for its
    row's lock (another session holds it): the error reaches the caller, and
    the transaction its query began is rolled back (the round's claim too),
    not left open on the connection for the next statement to join."""
    _enqueue(0, 0)
    [claim] = _claim(mysql_alias, 1)
    holder = {"seq": claim["seq"], "owner": "w1", "token": claim["token"]}
    ending = {"status": "SUCCESSFUL", "return_value": "1", "error": None}
    ending |= {"refund": 0, "delay": 0}

    def end() -> list[int]:
        """The seqs ended."""
        if write == "finish":
            return [holder["seq"] for _row in _run(mysql_alias, "finish", **holder, **ending)]
        one = Ending(claim["seq"], "w1", claim["token"], "SUCCESSFUL", return_value="1")
        ended, _claimed = QueuedTask.objects.finish_and_claim([one], "w1", queues=None, limit=1)
        return list(ended)

    connection = connections[mysql_alias]
    other = connections.create_connection(mysql_alias)
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute(f"SELECT seq FROM {TABLE} WHERE seq = %s FOR UPDATE", [claim["seq"]])
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
        with pytest.raises(OperationalError, match="Lock wait timeout"):
            end()
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@in_transaction")
            assert cursor.fetchone() == (0,)
    finally:
        other.rollback()
        other.close()
        connection.close()  # (and its session's lock wait timeout)
    statuses = QueuedTask.objects.using(mysql_alias).order_by("seq").values_list("status")
    assert list(statuses) == [("RUNNING",), ("READY",)]
    assert end() == [claim["seq"]]


def test_an_enqueue_is_its_insert_and_the_read_of_what_it_stored(
    mysql_queue_alias: str, tmp_path: Any
) -> None:
    """One statement on MariaDB; on MySQL one query with several statements a
    query (two without); in autocommit or in the caller's transaction. A
    unique key another task holds stores nothing, and the holder's result
    comes back."""
    connection = connections[mysql_queue_alias]
    rows = QueuedTask.objects.using(mysql_queue_alias)
    record = str(tmp_path / "record")
    with CaptureQueriesContext(connection) as queries:
        single = djtasks.add.enqueue(1, 2)
        with transaction.atomic(using=mysql_queue_alias):
            first = djtasks.unique_record.enqueue(record, "a")
        held = djtasks.unique_record.enqueue(record, "a")
    # Each query's statements, by their first word; the atomic()'s BEGIN and COMMIT aside.
    steps = [
        [step.split()[0] for step in query["sql"].split(mysql.MYSQL_STEP)]
        for query in queries.captured_queries
        if query["sql"] not in {"BEGIN", "COMMIT"}
    ]
    if connection.mysql_is_mariadb:
        # The INSERT with RETURNING (whose holder's row is left out); of one
        # task, its VALUES.
        stored = [["INSERT"]]
        inserts = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip()[:6] == "INSERT"]
        assert len(inserts) == 3 and all("RETURNING" in sql for sql in inserts)
        assert all("VALUES (" in sql and "JSON_TABLE" not in sql for sql in inserts)
    elif mysql.multi_statements(connection):
        stored = [["INSERT", "SELECT"]]
    else:
        stored = [["INSERT"], ["SELECT"]]
    # The held key too: the INSERT and its read (of nothing), then the ORM's
    # read of the holder.
    assert steps == stored * 3 + [["SELECT"]]
    assert held.id == first.id
    assert rows.count() == 2
    for result in (single, first):
        assert result.enqueued_at == rows.get(uuid=result.id).enqueued_at


def test_an_enqueue_stores_each_task_its_own_values_one_task_or_several(
    mysql_queue_alias: str,
) -> None:
    """Several tasks are one INSERT from JSON_TABLE; on MariaDB one task is an
    INSERT of its VALUES. Either way each row holds its own uuid, arguments
    and flow key, and its key's slots are made."""
    connection = connections[mysql_queue_alias]
    backend = djtasks.per_account.get_backend()
    with CaptureQueriesContext(connection) as queries:
        several = backend.enqueue_many(djtasks.per_account, [(["a"], {}), (["b"], {"seconds": 1})])
        one = djtasks.per_account.enqueue("c", seconds=2)
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip()[:6] == "INSERT"]
    assert len(inserts) == 2 and "JSON_TABLE" in inserts[0]
    assert ("VALUES (" in inserts[1]) is connection.mysql_is_mariadb
    rows = {str(row.uuid): row for row in QueuedTask.objects.using(mysql_queue_alias)}
    assert len(rows) == 3
    expected = [("a", {}), ("b", {"seconds": 1}), ("c", {"seconds": 2})]
    for result, (account, kwargs) in zip([*several, one], expected, strict=True):
        row = rows[result.id]
        assert row.args_kwargs == {"args": [account], "kwargs": kwargs}
        assert (row.concurrency_key, row.concurrency) == (f"account:{account}", 2)
        assert result.enqueued_at == row.enqueued_at
    slots = FlowSlot.objects.using(mysql_queue_alias).values_list("flow_key", "slot")
    assert sorted(slots) == [(f"account:{k}", n) for k in "abc" for n in (1, 2)]


@pytest.mark.parametrize(
    ("rows", "only"),
    [
        ('[{"uuid": "a"}]', {"uuid": "a"}),
        (' \n[ {"uuid": "a", "args": [1, "]"]} ]\n', {"uuid": "a", "args": [1, "]"]}),
        ('[{"uuid": "a"}, {"uuid": "b"}]', None),
        ('[{"uuid": "a"} ,{"uuid": "b"}]', None),
        ("[]", None),
    ],
    ids=["one", "one-spaced", "two", "two-spaced", "none"],
)
def test_mariadbs_enqueue_tells_one_task_from_several_by_reading_the_first(
    rows: str, only: dict[str, Any] | None
) -> None:
    """MariaDB stores one task by an INSERT of its VALUES: the reader tells
    one from several without parsing a bulk enqueue's every task."""
    from django_bgtasks.db.mysql.mariadb import _only_task

    assert _only_task(rows) == only
    with pytest.raises(ValueError, match="a JSON array"):
        _only_task('{"uuid": "a"}')


def test_an_enqueue_that_fails_stores_nothing_and_leaves_the_connection_usable(
    mysql_queue_alias: str, tmp_path: Any
) -> None:
    """The INSERT waits past the lock wait timeout (another session holds the
    row of the unique key it meets): the error reaches the caller, the read
    after it never runs, and the connection's next query is answered (no
    result left unread)."""
    record = str(tmp_path / "record")
    first = djtasks.unique_record.enqueue(record, "a")
    connection = connections[mysql_queue_alias]
    other = connections.create_connection(mysql_queue_alias)
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute(
                f"SELECT seq FROM {TABLE} WHERE uuid = %s FOR UPDATE", [uuid.UUID(first.id).hex]
            )
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
        with pytest.raises(OperationalError, match="Lock wait timeout"):
            djtasks.unique_record.enqueue(record, "a")
        assert QueuedTask.objects.using(mysql_queue_alias).count() == 1
        after = djtasks.add.enqueue(1, 2)
        assert QueuedTask.objects.using(mysql_queue_alias).filter(uuid=after.id).exists()
    finally:
        other.rollback()
        other.close()
        connection.close()  # (and its session's lock wait timeout)
