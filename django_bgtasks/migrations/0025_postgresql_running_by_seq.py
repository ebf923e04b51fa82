"""PostgreSQL: the running tasks in an index of their own by ``seq``, as
the ready ones (0021), the succeeded and the failed ones (0023) have.

The operator's reads run with sorts off (``QueueManager.index_reads``,
since a plan that read every ready row of the claim's index and sorted them
for a page of 101). The running rows had no index in ``seq`` order: their
one index is by owner (0017's, for the give-back), so a page or a count of
them, newest first, became a read of the primary key
past every other row. At 10,000,000 rows with stale statistics the admin's
list of the running tasks took 3.8-6.1 s, and ``bgtasks list`` 2.1 s
(docs/benchmarks.md, "Search terms"); a sort of the few running rows would
have been nothing, but a sort is what the reads may not do.

A claim writes one entry more, to a small index (the rows that are running
now, and the dead entries a vacuum takes away): its row is written to
every index anyway, its status being in them.

Built ``CONCURRENTLY`` (this migration is not atomic): enqueues, claims and
ends go on meanwhile. A build that fails leaves an INVALID index: ``DROP
INDEX`` it and migrate again (docs/operations.md, "Upgrading"). MySQL/MariaDB
and SQLite keep 0021's (status, seq), which their planners read.

The SQL is this migration's entry in db/postgresql/schema.py, which
db/schema.py runs on PostgreSQL alone: an entry is what a released migration
ran and is never edited, so the migration keeps doing what it did when it was
written.
"""

from __future__ import annotations

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY can't run in a transaction.
    atomic = False
    dependencies = [("django_bgtasks", "0024_worker_lost")]

    # Only PostgreSQL's indexes differ from Django's model state (0023's note).
    operations = [
        migrations.RunPython(
            schema.forwards("0025_postgresql_running_by_seq"),
            schema.backwards("0025_postgresql_running_by_seq"),
            elidable=False,
        )
    ]
