"""PostgreSQL: the queue's indexes cover only the rows they are for, so that
a claim and an end of a run write fewer index entries, and a renewal none.

A row's claim (``READY`` to ``RUNNING``) and its end (to ``SUCCESSFUL``, say)
change its status, which every status-led index holds, so neither can be a
HOT update: each adds a new entry to *every* index of the table. With the
plain indexes of 0007, 0012 and 0013 that was seven entries an update, 14 a
task, most of them for rows no statement would look up by them again. Here:

* the claim's two indexes (its order, and a queue's rows in that order)
  hold ``READY`` rows only (``WHERE status = 'READY'``): a claim or an end
  adds no entry to them; an enqueue or a retry does, as before;
* the recovery's index holds ``RUNNING`` rows only, by ``owner`` (the
  give-back looks a worker's up): a claim adds one entry, an end none. It no
  longer holds ``updated_at``, which every renewal writes: a renewal changes
  no indexed column, so it can be a HOT update, and the recovery reads the
  few running rows' ``updated_at`` from the table;
* the failed rows, by ``seq``, for the admin's and the API's "failed" list,
  newest first, which the plain status index served before;
* the ``varchar_pattern_ops`` index Django adds beside the unique
  ``active_key`` goes: nothing looks it up by prefix (0009 did the same for
  the lease names).

So a task's two updates add 5 index entries instead of 14
(docs/benchmarks.md, "Fewer index entries"). The statements need no change:
they name the statuses as literals, which is what lets PostgreSQL's planner
use a partial index. MySQL/MariaDB have no partial indexes and keep theirs;
SQLite keeps its too (its claim and end are one writer's, and rare next to
a server's). Django's model state still lists the two indexes of
``QueuedTask.Meta`` by their names, which these keep, so a later migration
that drops one by name still finds it.

The SQL is this migration's entry in db/postgresql/schema.py (the query that
finds the pattern index, the statements), which db/schema.py runs on
PostgreSQL alone: an entry is what a released migration ran and is never
edited, so the migration keeps doing what it did when it was written.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from django_bgtasks.db import schema

STEP = "0017_postgresql_partial_queue_indexes"


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # The pattern index's name is Django's hash: found by what it is (as 0009;
    # given the table's name as it is, where 0009 gave it quoted: as each did).
    schema.drop_pattern_indexes(STEP, apps, schema_editor, ["QueuedTask"], quoted=False)
    schema.forwards(STEP)(apps, schema_editor)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema.backwards(STEP)(apps, schema_editor)
    schema.create_pattern_indexes(STEP, apps, schema_editor, {"QueuedTask": "active_key"})


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0016_trace_context")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
