"""PostgreSQL: the succeeded and the failed tasks each in an index of their
own by ``seq``, in place of 0021's one index of both by (status, seq).

The admin's list filtered by a finished status (and by a queue beside it)
reads the newest such tasks, and counts up to 10,000 of them. With the
table's statistics fresh, the planner read them from the primary key,
newest first, with the status as a filter, not from 0021's (status, seq):
its statistics say a tenth of the rows failed, spread evenly, and a read
of the primary key fetches the table's pages in their order, where a read
of an index led by the status counts each fetch as a random one. But the
newest rows of a big table are its ready ones: at 10,000,000 rows, a page
of the failed tasks of one queue stepped over the 1,000,000 ready rows and
a million more (1.4 s; docs/benchmarks.md, "A million tasks"). An index of
``seq`` alone whose predicate is the status has the primary key's order and
its page fetches, without the rows of another status: the read the
planner finds cheapest is the one that reads what it returns, with fresh
statistics or stale (as 0021's ``bgtasks_queued_ready_seq`` for the ready
ones). An end writes one entry, to one of them, as it did to 0021's.

Nothing but the operator's reads (``operations/queued.py``) asks for one
finished status: the claim and the ends read ready and running rows, and
``bgtasks prune`` the finished ones by ranges of the primary key.

Built ``CONCURRENTLY`` (this migration is not atomic): enqueues, claims and
ends go on meanwhile, and 0021's index is dropped after both are built. A
build that fails leaves an INVALID index: ``DROP INDEX`` it and migrate
again (docs/operations.md, "Upgrading"). MySQL/MariaDB and SQLite keep
0021's (status, seq), which their planners read for these lists.

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
    dependencies = [("django_bgtasks", "0022_flow_slots_made_once")]

    # Django's model state keeps (status, seq) by its name, the index the
    # other engines have (as 0021 left it): only PostgreSQL's differ.
    operations = [
        migrations.RunPython(
            schema.forwards("0023_postgresql_finished_by_status"),
            schema.backwards("0023_postgresql_finished_by_status"),
            elidable=False,
        )
    ]
