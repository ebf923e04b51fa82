"""db/mysql/queue.py on MariaDB/MySQL: what its way of running the queue's
statements adds to the rules every engine's tests check (tests/queue/,
tests/faults/test_backend_workers.py). A claim of several rows, and
``finish_many``, run through db/engines.py here, as the queue's manager will
run them; a claim skips only the rows another claim holds; an error inside a
statement's transaction leaves none open; each one alike with the steps in
one query (mysqlclient's default) and one query a step. (MariaDB's own
statements: tests/db/mysql/test_mariadb.py; the enqueue:
tests/db/mysql/test_enqueue.py.)"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from django.db import OperationalError, connections

from django_bgtasks.db import engines
from django_bgtasks.db.mysql import leases as mysql
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import with_queues
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.manager import Ending
from tests import djtasks

TABLE = QueuedTask._meta.db_table


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
