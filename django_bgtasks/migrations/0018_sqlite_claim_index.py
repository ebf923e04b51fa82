"""SQLite: the claim's order as an index, (status, priority DESC, seq), as
0012 gave it to MySQL and 0013 to PostgreSQL.

Without it, SQLite's claim read every ready row by the status index and
sorted them all to take the first few (``USE TEMP B-TREE FOR ORDER BY``):
5.4 ms a claim with 20,000 ready tasks, on the development machine, and a
worker's drain slowed as its backlog grew (1,530 tasks a second from 10,000
queued, 1,000 from 20,000). With it, the claim reads the ready rows in its
order and stops at its limit: 8 µs (docs/benchmarks.md, "SQLite: the
claim's index").

The SQL is written out here, not imported from db/: a migration must keep
doing what it did when it was written.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

FORWARDS = """CREATE INDEX bgtasks_queued_claim
    ON django_bgtasks_queuedtask (status, priority DESC, seq)"""
BACKWARDS = "DROP INDEX IF EXISTS bgtasks_queued_claim"


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(FORWARDS)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(BACKWARDS)


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0017_postgresql_partial_queue_indexes")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
