"""The indexes an operator's reads of a big queue table need: a queue's
tasks, a task path's, and a status's, each newest first.

The admin, the JSON API and ``bgtasks list`` show Django Tasks newest first
(by ``seq``), filtered by queue, by task path and by status, and count them
up to a cap; the admin's filters list the queues and task paths there are.
Without an index led by the filtered column, each of those read the table
until it had found enough rows: at once for a common value, the whole table
(10,000,000 rows, seconds) for a rare one or one with none, and every time
for the list of the queues there are (docs/benchmarks.md, "A million
tasks"). With these, each is a read of the index in ``seq`` order, and the
queues and task paths there are are a loose scan of it (one descent a name).

* ``bgtasks_queued_queue`` (queue_name, seq) and ``bgtasks_queued_task``
  (task_path, seq), on every engine.
* ``bgtasks_queued_status`` (status, seq). On PostgreSQL the finished rows
  alone (``WHERE status IN ('SUCCESSFUL', 'FAILED')``: an end adds an entry,
  an enqueue and a claim none), which serves the failed ones too, so 0017's
  ``bgtasks_queued_failed`` goes; and beside it ``bgtasks_queued_ready_seq``,
  the ready rows by seq (an enqueue or a retry adds an entry), so that the
  newest ready tasks are read in order rather than all of them sorted, and
  the running rows keep their index by owner (they are few). Its predicate
  has ``seq > 0`` (true of every row), which the lists state
  (``operations/queued.py``'s ``of_status``) and the claim does not: so the
  claim can't use it. With statistics that say there are no ready rows (a
  table analyzed before a backlog came), both indexes of the ready rows
  look alike to the planner, the one-column one cheaper, and the claim read
  every ready row through it to sort them, a loose scan of queue names
  likewise (3,367 pages for 8 tasks of 20,000; tests/queue/
  test_claim_reads.py). On
  MySQL/MariaDB and SQLite, which have no partial index, every row. Django's
  model state lists (status, seq), by its name, as 0017 did.
On PostgreSQL the indexes are built ``CONCURRENTLY`` (this migration is not
atomic): enqueues, claims and ends go on while they are built, which takes
about a minute for 10,000,000 rows on the development machine. A build that
fails (the server restarted, say) leaves an INVALID index behind: run the
migration again after ``DROP INDEX`` of it (docs/operations.md, "Upgrading").
MariaDB builds them in place, without locking the table (InnoDB's online
ALTER). SQLite locks the database for the build.

The SQL is this migration's entry in each engine's db/<engine>/schema.py,
which db/schema.py runs on the engine migrated: an entry is what a released
migration ran and is never edited, so the migration keeps doing what it did
when it was written.
"""

from __future__ import annotations

from django.db import migrations, models

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY can't run in a transaction; MySQL has none
    # for DDL anyway.
    atomic = False
    dependencies = [("django_bgtasks", "0020_sqlite_flow_slot_take")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="queuedtask",
                    index=models.Index(fields=["queue_name", "seq"], name="bgtasks_queued_queue"),
                ),
                migrations.AddIndex(
                    model_name="queuedtask",
                    index=models.Index(fields=["task_path", "seq"], name="bgtasks_queued_task"),
                ),
                migrations.AddIndex(
                    model_name="queuedtask",
                    index=models.Index(fields=["status", "seq"], name="bgtasks_queued_status"),
                ),
            ],
            database_operations=[
                migrations.RunPython(
                    schema.forwards("0021_queue_list_indexes"),
                    schema.backwards("0021_queue_list_indexes"),
                    elidable=False,
                )
            ],
        )
    ]
