"""The finished tasks by the time they finished: what the dashboard's rollup
(``queue/rollup.py``) reads, a minute of them at a time, whatever the
size of the table. Without it a minute's read is a scan of every row.

An index of ``finished_at`` only where it is set: the ready and running rows
(``NULL``) are not in it, so an enqueue and a claim write nothing to it and
an end writes one entry (on PostgreSQL an end's row is written to every
index anyway: its status is in them). MySQL/MariaDB have no partial indexes:
there the ``NULL``s are entries too. docs/benchmarks.md ("The dashboard")
has the drain with and without it.

On PostgreSQL built ``CONCURRENTLY`` (this migration is not atomic):
enqueues, claims and ends go on meanwhile; a build that fails leaves an
INVALID index: ``DROP INDEX`` it and migrate again (docs/operations.md,
"Upgrading"). MariaDB builds a secondary index in place without blocking
writes; SQLite locks the file while it builds.

Not in the model's state, as 0023's and 0025's are not: the statements are
each engine's own. The SQL is this migration's entry in each engine's
db/<engine>/schema.py, which db/schema.py runs on the engine migrated (one the
package doesn't run on is refused): an entry is what a released migration ran
and is never edited, so the migration keeps doing what it did when it was
written.
"""

from __future__ import annotations

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY can't run in a transaction.
    atomic = False

    dependencies = [("django_bgtasks", "0026_queue_rollups")]

    operations = [
        migrations.RunPython(
            schema.forwards("0027_finished_by_time", every_engine=True),
            schema.backwards("0027_finished_by_time", every_engine=True),
            elidable=False,
        )
    ]
