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

The SQL is written out here, not imported from db/: a migration must keep
doing what it did when it was written.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TABLE = "django_bgtasks_queuedtask"

FORWARDS = [
    "DROP INDEX IF EXISTS bgtasks_queued_claim",
    """CREATE INDEX bgtasks_queued_claim ON django_bgtasks_queuedtask (priority DESC, seq)
        WHERE status = 'READY'""",
    "DROP INDEX IF EXISTS bgtasks_queued_ready",
    """CREATE INDEX bgtasks_queued_ready
        ON django_bgtasks_queuedtask (queue_name, priority DESC, seq)
        WHERE status = 'READY'""",
    "DROP INDEX IF EXISTS bgtasks_queued_running",
    """CREATE INDEX bgtasks_queued_running ON django_bgtasks_queuedtask (owner)
        WHERE status = 'RUNNING'""",
    """CREATE INDEX bgtasks_queued_failed ON django_bgtasks_queuedtask (seq)
        WHERE status = 'FAILED'""",
]
BACKWARDS = [
    "DROP INDEX IF EXISTS bgtasks_queued_failed",
    "DROP INDEX IF EXISTS bgtasks_queued_running",
    "CREATE INDEX bgtasks_queued_running ON django_bgtasks_queuedtask (status, updated_at)",
    "DROP INDEX IF EXISTS bgtasks_queued_ready",
    """CREATE INDEX bgtasks_queued_ready
        ON django_bgtasks_queuedtask (status, queue_name, priority DESC, seq)""",
    "DROP INDEX IF EXISTS bgtasks_queued_claim",
    "CREATE INDEX bgtasks_queued_claim ON django_bgtasks_queuedtask (status, priority DESC, seq)",
]

# The pattern index's name is Django's hash: found by what it is (as 0009).
# (alike 0009's FIND on purpose: a migration keeps its own SQL)
PATTERN_INDEXES = """
    SELECT index_class.relname
    FROM pg_index i
    JOIN pg_class index_class ON index_class.oid = i.indexrelid
    JOIN pg_opclass opclass ON opclass.oid = ANY(i.indclass::oid[])
    WHERE i.indrelid = %s::regclass
        AND opclass.opcname IN ('varchar_pattern_ops', 'text_pattern_ops')
"""


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    editor: Any = schema_editor  # its index methods are untyped in django-stubs
    model = apps.get_model("django_bgtasks", "QueuedTask")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(PATTERN_INDEXES, [TABLE])
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        schema_editor.execute(editor._delete_index_sql(model, name))
    for statement in FORWARDS:
        schema_editor.execute(statement)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in BACKWARDS:
        schema_editor.execute(statement)
    editor: Any = schema_editor  # the PostgreSQL schema editor's own method
    model = apps.get_model("django_bgtasks", "QueuedTask")
    statement = editor._create_like_index_sql(model, model._meta.get_field("active_key"))
    if statement is not None:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0016_trace_context")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
