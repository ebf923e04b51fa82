"""PostgreSQL: every change of a lease row notifies ``bgtasks_changes``.

A trigger, not a ``pg_notify`` in each statement, so that every lease
operation stays its one statement and round trip, and so that a write made
by hand (the admin, ``psql``) is announced too. The payload is JSON,
``{"name": ..., "token": ...}``; PostgreSQL delivers it when the writing
transaction commits, and never for one that rolls back.

A bare heartbeat (a write of ``updated_at`` alone) and a fence (a write of
nothing) notify nobody: they change nothing a watcher shows, and the
heartbeats of many leases would otherwise flood every listener. SQLite and
MySQL have no notifications; django_bgtasks.changes polls them instead.

The SQL is written out here, not imported from sql.py: a migration must keep
doing what it did when it was written.
"""

from collections.abc import Callable

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

POSTGRESQL_FORWARDS = [
    """
    CREATE FUNCTION bgtasks_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        changed django_bgtasks_backgroundtask;
    BEGIN
        IF TG_OP = 'DELETE' THEN changed := OLD; ELSE changed := NEW; END IF;
        PERFORM pg_notify('bgtasks_changes',
            json_build_object('name', changed.name, 'token', changed.token)::text);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER bgtasks_notify_insert_delete
    AFTER INSERT OR DELETE ON django_bgtasks_backgroundtask
    FOR EACH ROW EXECUTE FUNCTION bgtasks_notify_change()
    """,
    # UPDATE OF every column but updated_at: PostgreSQL decides from the
    # statement's SET list, once, whether the trigger applies, so a heartbeat
    # (SET updated_at) and a fence (SET updated_at = updated_at) don't even
    # consider it, whatever the size of the row's value. (Comparing OLD and
    # NEW per row would cost every heartbeat two conversions of the whole
    # row.) A migration that adds a column to the table must add it here.
    """
    CREATE TRIGGER bgtasks_notify_update
    AFTER UPDATE OF name, value, running, owner, token, ttl, started_at, finished_at,
        cancel_requested, outcome, error, attempt, next_run_at, request, requested_at,
        requested_by, run_args, schedule, scheduled_for, skipped, trigger, result, result_note
    ON django_bgtasks_backgroundtask
    FOR EACH ROW EXECUTE FUNCTION bgtasks_notify_change()
    """,
]
POSTGRESQL_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_notify_update ON django_bgtasks_backgroundtask",
    "DROP TRIGGER IF EXISTS bgtasks_notify_insert_delete ON django_bgtasks_backgroundtask",
    "DROP FUNCTION IF EXISTS bgtasks_notify_change()",
]


def _run(statements_by_vendor: dict[str, list[str]]) -> Callable[..., None]:
    def run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0007_queued_tasks")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRESQL_FORWARDS}),
            _run({"postgresql": POSTGRESQL_BACKWARDS}),
            elidable=False,
        ),
    ]
