"""How MySQL and MariaDB run the statements (db/mysql/driver.py): the queue's
statements MariaDB's own where it has them, else MySQL's; each statement
run by its reader into the rows RETURNING gives on the other engines; a
time as the naive UTC datetime Django stores; and several of the queue's
writes as one query where the connection allows, none written when one
fails. (Each way of running them, on every test of the queue here:
tests/db/mysql/conftest.py.)"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DatabaseError, connections
from django.test.utils import CaptureQueriesContext

from django_bgtasks.core import store
from django_bgtasks.db import engines
from django_bgtasks.db.mysql import leases, mariadb
from django_bgtasks.db.mysql import queue as mysql_queue
from django_bgtasks.db.mysql.driver import DRIVER
from django_bgtasks.db.rows import MATCHED
from django_bgtasks.models import QueuedTask
from tests import djtasks


def test_mariadb_runs_its_own_queue_statements_and_mysql_its(mysql_alias: str) -> None:
    connection = connections[mysql_alias]
    connection.ensure_connection()
    if not connection.mysql_is_mariadb:
        pytest.skip("BGTASKS_MYSQL_URL is MySQL: MariaDB's statements can't run there")
    try:
        assert DRIVER.queue_statements(connection) == ("mariadb", mariadb.QUEUE)
        mariadbs = engines.queue_statements(connection, table="q_driver", paused="p")
        connection.mysql_is_mariadb = False  # (Django's cached_property)
        assert DRIVER.queue_statements(connection) == ("mysql", mysql_queue.QUEUE)
        mysqls = engines.queue_statements(connection, table="q_driver", paused="p")
    finally:
        vars(connection).pop("mysql_is_mariadb", None)
    # Each rendered and kept apart: the same connection's tables, two sets.
    assert mariadbs.enqueue != mysqls.enqueue and "RETURNING" in mariadbs.enqueue
    assert mariadbs.claim != mysqls.claim and mariadbs.renew == mysqls.renew


def test_each_statement_is_read_into_the_rows_returning_would_give(mysql_alias: str) -> None:
    """A write reports a ``matched`` row for each row it matched, a read its
    rows by name: lease statements by db/mysql/leases.py's readers, the
    queue's by db/mysql/queue.py's."""
    connection = connections[mysql_alias]
    queue = QueuedTask.objects._statements(connection)
    pause = {"queue": "paused-here"}
    assert DRIVER.run(connection, "pause_queue", queue.pause_queue, pause, queue=True) == [
        {MATCHED: 1}
    ]
    assert DRIVER.run(connection, "pause_queue", queue.pause_queue, pause, queue=True) == []
    [paused] = DRIVER.run(connection, "paused_queues", queue.paused_queues, {}, queue=True)
    assert paused["queue_name"] == "paused-here" and isinstance(paused["paused_at"], dt.datetime)
    clock = store.statements(connection).clock
    [now] = DRIVER.run(connection, "clock", clock, {}, queue=False)
    assert list(now) == ["db_now"] and isinstance(now["db_now"], dt.datetime)
    assert DRIVER.run(connection, "unpause_queue", queue.unpause_queue, pause, queue=True) == [
        {MATCHED: 1}
    ]


def test_a_time_is_the_naive_utc_datetime_django_stores(mysql_alias: str) -> None:
    at = dt.datetime(2026, 1, 2, 8, 34, 5, 678901, tzinfo=dt.timezone(dt.timedelta(hours=5.5)))
    assert DRIVER.time_param(at) == dt.datetime(2026, 1, 2, 3, 4, 5, 678901)
    # Read by the server as the instant it is, in the session's time zone (UTC).
    query = "SELECT TIMESTAMPDIFF(MICROSECOND, '2026-01-02 03:04:05', %(at)s) AS micros"
    params = {"at": DRIVER.time_param(at)}
    rows = DRIVER.run(connections[mysql_alias], "clock", query, params, queue=False)
    assert rows == [{"micros": 678901}]


def test_several_writes_are_one_query_where_the_connection_allows(
    mysql_queue_alias: str,
) -> None:
    connection = connections[mysql_queue_alias]
    djtasks.add.get_backend().enqueue_many(djtasks.add, [((1, 2), {})] * 2)
    [claim] = QueuedTask.objects.claim_many("w", queues=None, limit=1)
    ready = QueuedTask.objects.using(mysql_queue_alias).get(status="READY")
    rendered = QueuedTask.objects._statements(connection)
    params = {"seqs": DRIVER.list_param([ready.seq]), "owner": "w", "held": "[]"}
    writes = ["cancel_many", "give_back"]
    broken = f"UPDATE bgtasks_no_such_table SET n = 1{leases.MYSQL_STEP}SELECT 1"
    with pytest.raises(DatabaseError):
        DRIVER.run_together(connection, writes, [rendered.cancel_many, broken], params)
    rows = QueuedTask.objects.using(mysql_queue_alias)
    assert dict(rows.values_list("seq", "status")) == {claim.seq: "RUNNING", ready.seq: "READY"}
    with CaptureQueriesContext(connection) as queries:
        cancelled, given_back = DRIVER.run_together(
            connection, writes, [rendered.cancel_many, rendered.give_back], params
        )
    assert [(row["seq"], row["status"]) for row in cancelled] == [(ready.seq, "FAILED")]
    assert [row["seq"] for row in given_back] == [claim.seq]
    assert dict(rows.values_list("seq", "status")) == {claim.seq: "READY", ready.seq: "FAILED"}
    sent = [query["sql"] for query in queries.captured_queries]
    if leases.multi_statements(connection):
        [query] = sent
        steps = query.split(leases.MYSQL_STEP)
        assert (steps[0], steps[-1]) == ("START TRANSACTION", "COMMIT")
    else:  # a step a query, in atomic()
        assert len(sent) > 2 and "START TRANSACTION" not in sent
