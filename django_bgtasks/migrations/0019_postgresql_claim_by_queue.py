"""PostgreSQL: the claim reads its queues one at a time, from the ready rows'
index led by the queue name (``bgtasks_queued_ready``), so the index in the
claim's order across every queue (``bgtasks_queued_claim``, priority DESC,
seq, READY rows only) goes.

With that index there, a claim had two ways to its rows, and which one it
took depended on the planner's statistics: a table filled while they were
stale (autovacuum off, or the minutes before its next ANALYZE) had the
planner read every ready row of the queue through one index and sort them
all to return a few (300,000 ready tasks drained at 20 a second, against
1,300 after an ANALYZE). The claim now names one queue at a time, where the
queue's index gives its order (db/postgresql/queue.py), and with the other
index gone no plan reads a queue's rows out of order. An enqueue and a retry
write one index entry fewer.

The SQL is this migration's entry in db/postgresql/schema.py, which
db/schema.py runs on PostgreSQL alone: an entry is what a released migration
ran and is never edited, so the migration keeps doing what it did when it was
written.
"""

from __future__ import annotations

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0018_sqlite_claim_index")]

    operations = [
        migrations.RunPython(
            schema.forwards("0019_postgresql_claim_by_queue"),
            schema.backwards("0019_postgresql_claim_by_queue"),
            elidable=False,
        )
    ]
