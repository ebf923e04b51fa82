"""How PostgreSQL runs the statements (db/postgresql/driver.py): one each,
a claim's LIMIT written into its text before it is sent (checked, not a
parameter), and a list sent as an array, which the statements read as one.
(That the LIMIT in the text plans a claim once a connection:
tests/db/postgresql/test_queue.py; the prepared statements:
tests/db/test_cursor.py.)"""

from __future__ import annotations

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_bgtasks.db.postgresql.driver import DRIVER
from django_bgtasks.db.postgresql.queue import LIMIT_MARK

NUMBERS = f"SELECT n FROM generate_series(1, 10) AS n ORDER BY n LIMIT {LIMIT_MARK}"


def test_a_claims_limit_is_written_into_its_text(pg_alias: str) -> None:
    connection = connections[pg_alias]
    with CaptureQueriesContext(connection) as queries:
        rows = DRIVER.run(connection, "claim", NUMBERS, {"limit": 3}, queue=True)
    assert rows == [{"n": 1}, {"n": 2}, {"n": 3}]
    [sent] = queries.captured_queries
    assert sent["sql"].endswith("LIMIT 3") and LIMIT_MARK not in sent["sql"]
    # Not a whole number: refused before anything is sent.
    with CaptureQueriesContext(connection) as queries, pytest.raises(TypeError, match="limit"):
        DRIVER.run(connection, "claim", NUMBERS, {"limit": "3; SELECT 1"}, queue=True)
    assert queries.captured_queries == []


def test_a_list_is_sent_as_an_array(pg_alias: str) -> None:
    connection = connections[pg_alias]
    held = DRIVER.list_param((3, 1, 2))
    query = "SELECT %(held)s::bigint[] AS held, 2 = ANY(%(held)s::bigint[]) AS has_two"
    assert DRIVER.run(connection, "give_back", query, {"held": held}, queue=True) == [
        {"held": [3, 1, 2], "has_two": True}
    ]
    # An empty one too: no element, no type to guess.
    empty = {"held": DRIVER.list_param([])}
    assert DRIVER.run(connection, "give_back", query, empty, queue=True) == [
        {"held": [], "has_two": False}
    ]
