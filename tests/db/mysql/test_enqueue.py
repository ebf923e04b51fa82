"""The Django Tasks queue's enqueue on MySQL and MariaDB
(db/mysql/enqueue.py, and MariaDB's own of db/mysql/mariadb.py): the INSERT
and the read of what it stored, in one query where the connection allows
(on MariaDB the INSERT alone, with RETURNING); each task's own values, one
task or several; what it hands back of each (its uuid in hex digits, its
time as UTC text); and an enqueue that fails stores nothing and leaves the
connection usable. What every engine's enqueue does: tests/queue/test_enqueue.py."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.db import OperationalError, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_bgtasks.db.mysql import enqueue
from django_bgtasks.db.mysql import leases as mysql
from django_bgtasks.models import FlowSlot, QueuedTask
from tests import djtasks
from tests.db.mysql.test_queue import TABLE


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


def test_an_enqueue_hands_back_each_task_as_32_hex_digits_and_utc_text(mysql_alias: str) -> None:
    """What the read after the INSERT (or MariaDB's RETURNING) hands back of
    each task, alike on every engine (db/shared.py's ENQUEUE_COLUMNS): its
    uuid without dashes and its ``enqueued_at`` as UTC text, to the
    microsecond."""
    result = djtasks.add.enqueue(1, 2)
    row = QueuedTask.objects.using(mysql_alias).get(uuid=result.id)
    with connections[mysql_alias].cursor() as cursor:
        cursor.execute(f"SELECT {enqueue.enqueued('t.')} FROM {TABLE} t", {})
        [(hex_digits, at)] = cursor.fetchall()
    assert hex_digits == uuid.UUID(result.id).hex
    assert dt.datetime.fromisoformat(at).replace(tzinfo=dt.UTC) == row.enqueued_at
    assert row.enqueued_at.microsecond == int(at[-6:])
