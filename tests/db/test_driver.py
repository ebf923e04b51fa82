"""What an engine's driver is (db/driver.py), on every engine, each through
its own driver: its vendor's, with the schema SQL of its migrations; a time
and a list as its statements take them; rows by column name; and several of
the queue's writes in one transaction, none written when one fails. (Each
engine's own ways: tests/db/<engine>/test_driver.py.)"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DatabaseError, connections

from django_bgtasks.core import store
from django_bgtasks.db import engines
from django_bgtasks.db.driver import Driver, Steps
from django_bgtasks.models import BackgroundTask, QueuedTask
from tests import djtasks


def test_each_engine_has_a_driver_of_its_vendor_with_its_schema(db_alias: str) -> None:
    connection = connections[db_alias]
    driver = engines.driver(connection)
    assert isinstance(driver, Driver) and driver.vendor == connection.vendor
    assert driver.queue is not None
    # The SQL of the migrations that run some on this engine, by migration
    # (the flow limits' triggers on every one); an entry runs something.
    assert "0013_flow_limits" in driver.schema
    assert all(
        isinstance(steps, Steps) and (steps.forwards or steps.backwards or steps.pattern_indexes)
        for steps in driver.schema.values()
    )


def test_a_time_is_stored_as_the_instant_it_is(db_alias: str) -> None:
    connection = connections[db_alias]
    driver = engines.driver(connection)
    india = dt.timezone(dt.timedelta(hours=5, minutes=30))
    due = dt.datetime(2026, 1, 2, 8, 34, 5, 678000, tzinfo=india)
    params = {"name": "timed", "schedule": "@hourly", "next": driver.time_param(due), "ttl": 30.0}
    rendered = store.statements(connection)
    assert driver.run(connection, "ensure_schedule", rendered.ensure_schedule, params, queue=False)
    assert BackgroundTask.objects.using(db_alias).get(name="timed").next_run_at == due


def test_a_list_is_read_by_the_statements_and_rows_come_by_name(tasks_alias: str) -> None:
    connection = connections[tasks_alias]
    driver = engines.driver(connection)
    djtasks.add.get_backend().enqueue_many(djtasks.add, [((1, 2), {})] * 3)
    held, *lost = QueuedTask.objects.claim_many("w", queues=None, limit=3)
    params = {"owner": "w", "held": driver.list_param([held.seq])}
    give_back = QueuedTask.objects._statements(connection).give_back
    rows = driver.run(connection, "give_back", give_back, params, queue=True)
    assert sorted(row["seq"] for row in rows) == sorted(claim.seq for claim in lost)
    assert {row["task_path"] for row in rows} == {"tests.djtasks.add"}
    assert {str(row["uuid"]).replace("-", "") for row in rows} == {
        claim.uuid.hex for claim in lost
    }


def test_several_writes_are_one_transaction_none_written_when_one_fails(
    tasks_alias: str,
) -> None:
    connection = connections[tasks_alias]
    driver = engines.driver(connection)
    rows = QueuedTask.objects.using(tasks_alias)
    djtasks.add.get_backend().enqueue_many(djtasks.add, [((1, 2), {})] * 2)
    [claim] = QueuedTask.objects.claim_many("w", queues=None, limit=1)
    ready = rows.get(status="READY")
    rendered = QueuedTask.objects._statements(connection)
    params = {"seqs": driver.list_param([ready.seq]), "owner": "w", "held": driver.list_param([])}
    writes = ["cancel_many", "give_back"]
    broken = "UPDATE bgtasks_no_such_table SET n = 1"
    with pytest.raises(DatabaseError):
        driver.run_together(connection, writes, [rendered.cancel_many, broken], params)
    assert dict(rows.values_list("seq", "status")) == {claim.seq: "RUNNING", ready.seq: "READY"}
    cancelled, given_back = driver.run_together(
        connection, writes, [rendered.cancel_many, rendered.give_back], params
    )
    assert [(row["seq"], row["status"]) for row in cancelled] == [(ready.seq, "FAILED")]
    assert [row["seq"] for row in given_back] == [claim.seq]
    assert dict(rows.values_list("seq", "status")) == {claim.seq: "READY", ready.seq: "FAILED"}
