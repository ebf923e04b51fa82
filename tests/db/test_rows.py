"""The rows the statements hand back (db/rows.py), on every engine: a
cursor's result as one dict a row by column name, none for a result of no
rows, and a write's ``matched`` rows alike whether the engine returns them
(RETURNING) or counts them (MySQL). (That every statement names its columns
alike on every engine, as their readers read them: tests/db/test_engines.py.)"""

from __future__ import annotations

from django.db import connections

from django_bgtasks.core import store
from django_bgtasks.db import engines
from django_bgtasks.db.rows import MATCHED, matched, named
from django_bgtasks.models import BackgroundTask


def test_a_cursors_rows_come_by_column_name(db_alias: str) -> None:
    with connections[db_alias].cursor() as cursor:
        cursor.execute(
            "SELECT n, label FROM (SELECT 2 AS n, 'b' AS label UNION ALL SELECT 1, 'a') r"
            " ORDER BY n"
        )
        assert named(cursor) == [{"n": 1, "label": "a"}, {"n": 2, "label": "b"}]
        cursor.execute("SELECT 1 AS n FROM (SELECT 1 AS one) r WHERE one = 2")
        assert named(cursor) == []


def test_a_writes_matched_rows_are_alike_on_every_engine(db_alias: str) -> None:
    assert matched(0) == [] and matched(2) == [{MATCHED: 1}, {MATCHED: 1}]
    lease = BackgroundTask.objects.try_claim("matched", "a", ttl=30)
    assert lease is not None
    connection = connections[db_alias]
    fence = store.statements(connection).fence
    holder = {"name": "matched", "owner": "a", "token": lease.token}
    assert engines.run(connection, "fence", fence, holder) == matched(1)
    assert engines.run(connection, "fence", fence, {**holder, "token": lease.token + 1}) == []
