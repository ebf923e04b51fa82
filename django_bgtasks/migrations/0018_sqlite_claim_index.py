"""SQLite: the claim's order as an index, (status, priority DESC, seq), as
0012 gave it to MySQL and 0013 to PostgreSQL.

Without it, SQLite's claim read every ready row by the status index and
sorted them all to take the first few (``USE TEMP B-TREE FOR ORDER BY``):
5.4 ms a claim with 20,000 ready tasks, on the development machine, and a
worker's drain slowed as its backlog grew (1,530 tasks a second from 10,000
queued, 1,000 from 20,000). With it, the claim reads the ready rows in its
order and stops at its limit: 8 µs (docs/benchmarks.md, "SQLite: the
claim's index").

The SQL is this migration's entry in db/sqlite/schema.py, which db/schema.py
runs on SQLite alone: an entry is what a released migration ran and is never
edited, so the migration keeps doing what it did when it was written.
"""

from __future__ import annotations

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0017_postgresql_partial_queue_indexes")]

    operations = [
        migrations.RunPython(
            schema.forwards("0018_sqlite_claim_index"),
            schema.backwards("0018_sqlite_claim_index"),
            elidable=False,
        )
    ]
