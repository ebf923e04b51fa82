"""PostgreSQL: a Django Task becoming ready notifies ``bgtasks_queue``.

A row of the queue table inserted or updated with ``status = 'READY'`` (an
``enqueue()``, a retry, a task recovered from a lost worker) notifies the
channel with JSON ``{"queue": ...}``, its queue's name. The workers' queue
threads listen through their process's change feed (django_bgtasks.changes)
and claim at once instead of at their next poll; a claim, a heartbeat and a
finish write another status, or none, and notify nobody. PostgreSQL delivers
the notification when the enqueuing transaction commits (so a task enqueued
inside ``transaction.atomic()`` wakes nobody before it can be claimed), never
for one that rolls back, and once per queue for the tasks one transaction
enqueues (identical payloads are folded into one).

SQLite and MySQL have no notifications: their queue threads poll.

The SQL is written out here, not imported from sql.py: a migration must keep
doing what it did when it was written.
"""

from collections.abc import Callable

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

POSTGRESQL_FORWARDS = [
    """
    CREATE FUNCTION bgtasks_notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('bgtasks_queue', json_build_object('queue', NEW.queue_name)::text);
        RETURN NULL;
    END
    $$
    """,
    # UPDATE OF status only: the heartbeat's writes (updated_at, progress)
    # don't even consider the trigger; WHEN keeps it to rows now ready.
    """
    CREATE TRIGGER bgtasks_notify_queue_ready
    AFTER INSERT OR UPDATE OF status ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (NEW.status = 'READY') EXECUTE FUNCTION bgtasks_notify_queue()
    """,
]
POSTGRESQL_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_notify_queue_ready ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_notify_queue()",
]


def _run(statements_by_vendor: dict[str, list[str]]) -> Callable[..., None]:
    def run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0009_postgresql_no_pattern_index")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRESQL_FORWARDS}),
            _run({"postgresql": POSTGRESQL_BACKWARDS}),
            elidable=False,
        ),
    ]
