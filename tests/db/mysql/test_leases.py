"""MySQL's and MariaDB's lease statements and their readers
(db/mysql/leases.py). With no UPDATE ... RETURNING, a write reports the
rows it matched (a no-op write too: Django's backend counts matched rows);
a heartbeat says whether a cancel was requested by which of its two steps
matched; and a renewal of both tables hands back the rows of its last
step, whether the connection sends its steps in one query or one a query.
(A claim's token, either way: tests/core/test_leases.py; what every
engine's statements do: tests/core/, tests/worker/test_renewal.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from django_bgtasks.core import store
from django_bgtasks.db import engines
from django_bgtasks.db.mysql import leases
from django_bgtasks.db.rows import MATCHED, Row
from django_bgtasks.db.shared import renew_many_param
from django_bgtasks.models import BackgroundTask, QueuedTask
from tests import djtasks

objects = BackgroundTask.objects


def _run(alias: str, statement: str, **params: Any) -> list[Row]:
    """The lease statement ``statement``, run with ``params`` as they are."""
    connection = connections[alias]
    query = getattr(store.statements(connection), statement)
    return engines.run(connection, statement, query, params)


@pytest.fixture(params=[True, False], ids=["one-round-trip", "multi-statements-off"])
def steps_alias(request: pytest.FixtureRequest, mysql_alias: str) -> Iterator[str]:
    """The MariaDB alias, its connection with several statements a query
    (mysqlclient's default) or not."""
    connection = connections[mysql_alias]
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    if not request.param:
        options["multi_statements"] = False
    try:
        connection.ensure_connection()
        assert leases.multi_statements(connection) is request.param
        yield mysql_alias
    finally:
        options.pop("multi_statements", None)
        connection.close()


def test_a_write_reports_the_rows_it_matched_though_it_changed_none(mysql_alias: str) -> None:
    lease = objects.try_claim("fenced", "a", ttl=30)
    assert lease is not None
    holder = {"name": "fenced", "owner": "a", "token": lease.token}
    # A fence writes updated_at as it is: matched, not changed.
    assert _run(mysql_alias, "fence", **holder) == [{MATCHED: 1}]
    assert _run(mysql_alias, "fence", **{**holder, "owner": "b"}) == []


def test_a_heartbeat_says_by_the_step_that_matched_whether_a_cancel_was_requested(
    mysql_alias: str,
) -> None:
    lease = objects.try_claim("beating", "a", ttl=30)
    assert lease is not None
    holder = {"name": "beating", "owner": "a", "token": lease.token}
    assert _run(mysql_alias, "renew", **holder) == [{"cancel_requested": 0}]
    assert objects.request_cancel("beating")
    assert _run(mysql_alias, "renew", **holder) == [{"cancel_requested": 1}]
    assert _run(mysql_alias, "renew", **{**holder, "token": lease.token + 1}) == []


def test_a_renewal_of_both_tables_hands_back_its_last_steps_rows(steps_alias: str) -> None:
    lease = objects.try_claim("renewed", "a", ttl=30)
    assert lease is not None
    djtasks.add.enqueue(1, 2)
    [claim] = QueuedTask.objects.claim_many("a", queues=None, limit=1)
    held = renew_many_param(
        [("renewed", "a", lease.token), ("not-held", "a", 1)], [(claim.seq, "a", claim.token)]
    )
    rows = _run(steps_alias, "renew_many", leases=held)
    assert sorted(
        (row["kind"], row["key"], row["token"], row["cancel_requested"]) for row in rows
    ) == [
        ("queued", str(claim.seq), claim.token, 0),
        ("task", "renewed", lease.token, 0),
    ]
    assert all(0 <= row["age"] < 5 for row in rows)
