"""db/params.py: one typed parameter object per operation, whose fields are
its statement's parameters on every engine, encoded by the engine's driver."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import json
import re

import pytest
from django.db import connections

from django_bgtasks.db import engines, params
from django_bgtasks.db.mysql import leases as mysql_leases
from django_bgtasks.db.mysql import mariadb as mariadb_queue
from django_bgtasks.db.mysql import queue as mysql_queue
from django_bgtasks.db.postgresql import leases as postgresql_leases
from django_bgtasks.db.postgresql import queue as postgresql_queue
from django_bgtasks.db.shared import QueueStatements, Statements
from django_bgtasks.db.sqlite import leases as sqlite_leases
from django_bgtasks.db.sqlite import queue as sqlite_queue

PLACEHOLDER = re.compile(r"%\((\w+)\)s")
KINDS = [
    kind
    for _, kind in inspect.getmembers(params, inspect.isclass)
    if issubclass(kind, params.Params) and kind is not params.Params
]
LEASES = {
    "postgresql": (postgresql_leases.STATEMENTS, postgresql_leases.FRAGMENTS),
    "mysql": (mysql_leases.STATEMENTS, mysql_leases.FRAGMENTS),
    "sqlite": (sqlite_leases.STATEMENTS, sqlite_leases.FRAGMENTS),
}
QUEUES = {
    "postgresql": postgresql_queue.QUEUE,
    "mysql": mysql_queue.QUEUE,
    "mariadb": mariadb_queue.QUEUE,
    "sqlite": sqlite_queue.QUEUE,
}
# Parameters a reader adds itself, from the ones it was given: MySQL's loose
# scan of the names walks on with ``after``; MariaDB's enqueue of one task
# sends its row's columns (db/mysql/mariadb.py's _enqueue).
READER_MADE = {("queue_names", "after"), ("task_paths", "after")} | {
    ("enqueue", name)
    for name in (
        "uuid",
        "args_kwargs",
        "concurrency_key",
        "rate_key",
        "fairness_key",
        "fairness_weight",
    )
}


def _parameters(template: str, fragments: dict[str, str]) -> set[str]:
    for name, fragment in fragments.items():
        template = template.replace("{" + name + "}", fragment)
    return set(PLACEHOLDER.findall(template))


def test_every_statement_has_one_parameter_object() -> None:
    lease = sorted(kind.STATEMENT for kind in KINDS if not kind.QUEUE)
    queue = sorted(kind.STATEMENT for kind in KINDS if kind.QUEUE)
    assert lease == sorted(field.name for field in dataclasses.fields(Statements))
    assert queue == sorted(field.name for field in dataclasses.fields(QueueStatements))


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
def test_a_parameter_objects_fields_are_its_statements_parameters(
    kind: type[params.Params],
) -> None:
    fields = {field.name for field in dataclasses.fields(kind)}
    assert set(kind.TIMES) | set(kind.LISTS) <= fields
    if kind.QUEUE:
        sets = {engine: (queue, {}) for engine, queue in QUEUES.items()}
    else:
        sets = dict(LEASES)
    found: set[str] = set()
    for engine, (statements, fragments) in sets.items():
        template = getattr(statements, kind.STATEMENT)
        used = _parameters(template, fragments)
        found |= used
        # An engine reads no parameter the object doesn't have.
        stray = {name for name in used - fields if (kind.STATEMENT, name) not in READER_MADE}
        assert stray == set(), (engine, kind.STATEMENT, stray)
    # Each field is some engine's parameter (finish_claim's: PostgreSQL's;
    # elsewhere the fields of finish_many's and the claim's, together).
    if kind is params.FinishClaim:
        found |= _parameters(QUEUES["mysql"].finish_many, {})
        found |= _parameters(QUEUES["mysql"].claim, {})
    if kind in (params.QueueClaim, params.AnyReady, params.FinishClaim):
        found.add("all")  # read by engines._for_queues where the SQL doesn't
    if kind.QUEUE and postgresql_queue.LIMIT_MARK in getattr(QUEUES["postgresql"], kind.STATEMENT):
        found.add("limit")  # written into PostgreSQL's text (db/postgresql/driver.py)
    assert fields <= found


def test_times_and_lists_are_encoded_by_the_connections_engine(db_alias: str) -> None:
    connection = connections[db_alias]
    due = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    slot = params.SkipSlot(name="n", due=due, next=due, schedule="@hourly")
    given_back = params.GiveBack(owner="o", held=[3, 1])
    slot_values = engines.encode(connection, slot)
    held = engines.encode(connection, given_back)["held"]
    if connection.vendor == "postgresql":
        assert slot_values["due"] == due and held == [3, 1]
    elif connection.vendor == "sqlite":
        assert slot_values["due"] == "2026-01-02 03:04:05.678" and json.loads(held) == [3, 1]
    else:
        assert slot_values["due"] == due.replace(tzinfo=None) and json.loads(held) == [3, 1]
    # The object keeps its Python values; None stays None.
    assert slot.due == due and given_back.held == [3, 1]
    assert engines.encode(connection, params.EnsureSchedule("n", "", None, 1.0))["next"] is None
