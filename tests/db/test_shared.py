"""What every engine's statements share (db/shared.py): a claim's pick of
its queues made for every queue, one, or several merged in the claim's
order (``with_queues``); a worker's renewal's leases as one JSON text,
sorted so that every statement locks its rows in one order; and the loose
scan of a column's values, each once and in order, on every engine. (That
the statements take values only as parameters:
tests/security/test_security.py; each engine's statements:
tests/db/<engine>/.)"""

from __future__ import annotations

import json

from django.db import connections

from django_bgtasks.db.rows import named
from django_bgtasks.db.shared import (
    QUEUE_INDEX,
    distinct_values,
    has_queue_pick,
    queue_pick,
    renew_many_param,
    with_queues,
)
from django_bgtasks.models import QueuedTask
from tests import djtasks


def test_a_claims_pick_is_made_for_every_queue_one_or_several() -> None:
    pick = queue_pick("EVERY", f"ONE({QUEUE_INDEX})", "8")
    query = f"SELECT * FROM ({pick}) picked"
    assert has_queue_pick(query)
    assert with_queues(query, None) == "SELECT * FROM (EVERY) picked"
    assert not has_queue_pick(with_queues(query, None))
    # No name: a pick of the first, which isn't there.
    assert with_queues(query, 0) == with_queues(query, 1) == "SELECT * FROM (ONE(0)) picked"
    assert with_queues(query, 2) == (
        "SELECT * FROM (SELECT * FROM (SELECT * FROM (ONE(0)) queue_0 UNION ALL"
        " SELECT * FROM (ONE(1)) queue_1) queues ORDER BY priority DESC, seq LIMIT 8) picked"
    )


def test_a_renewals_leases_are_sorted_by_key_in_one_json_text() -> None:
    text = renew_many_param([("b", "w", 2), ("a", "w", 5)], [(12, "w", 1), (3, "w", 4)])
    assert " " not in text
    assert json.loads(text) == {
        "tasks": [
            {"name": "a", "owner": "w", "token": 5},
            {"name": "b", "owner": "w", "token": 2},
        ],
        "queued": [{"seq": 3, "owner": "w", "token": 4}, {"seq": 12, "owner": "w", "token": 1}],
    }
    assert json.loads(renew_many_param([], [])) == {"tasks": [], "queued": []}


def test_a_columns_values_each_once_in_order(tasks_alias: str) -> None:
    """The statement of PostgreSQL's and SQLite's ``queue_names`` and
    ``task_paths``, one descent of the index a value. (MySQL and MariaDB,
    which run it too, read the same a statement a step: db/mysql/queue.py.)"""
    connection = connections[tasks_alias]
    for queue in ("other", "default", "other", "default"):
        djtasks.add.using(queue_name=queue).enqueue(1, 2)
    table = connection.ops.quote_name(QueuedTask._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(distinct_values("queue_name").format(table=table))
        assert named(cursor) == [{"value": "default"}, {"value": "other"}]
        QueuedTask.objects.using(tasks_alias).all().delete()
        cursor.execute(distinct_values("queue_name").format(table=table))
        assert named(cursor) == []
