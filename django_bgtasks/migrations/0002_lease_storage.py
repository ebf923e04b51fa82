"""Per-vendor storage for the lease table, which model fields can't express.

PostgreSQL: a fillfactor for HOT heartbeats. SQLite: the trigger that writes a
run's history row inside the statement that ends the run (PostgreSQL does that
with data-modifying CTEs in the statements themselves; SQLite has no such CTEs).

The SQL is written out here rather than imported from ``sql.py`` on purpose: a
migration must keep doing what it did when it was written.
"""

from collections.abc import Callable

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

POSTGRESQL_FORWARDS = [
    # Each lease row is rewritten on every heartbeat, forever. Leaving half of
    # each page free lets the new row version land on the same page, so the
    # update is HOT (no index entry written) and the old version is pruned in
    # place. The table holds one row per task name, so the space is trivial.
    "ALTER TABLE django_bgtasks_backgroundtask SET (fillfactor = 50)",
]
POSTGRESQL_BACKWARDS = ["ALTER TABLE django_bgtasks_backgroundtask RESET (fillfactor)"]

SQLITE_FORWARDS = [
    # A run ends when a running lease stops running (release, force release,
    # expiry) or is claimed by a new token (takeover of a stale holder, which
    # is recorded as lost as of its last heartbeat).
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE OF running, token ON django_bgtasks_backgroundtask
    WHEN OLD.running AND (NOT NEW.running OR NEW.token <> OLD.token)
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value)
        SELECT OLD.name, OLD.token, OLD.owner, OLD.started_at,
            CASE WHEN NEW.token <> OLD.token THEN OLD.updated_at ELSE NEW.finished_at END,
            CASE WHEN NEW.token <> OLD.token THEN 'lost' ELSE NEW.outcome END,
            CASE WHEN NEW.token <> OLD.token
                THEN 'lease expired; taken over by ' || NEW.owner ELSE NEW.error END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.value ELSE NEW.value END;
    END
    """,
]
SQLITE_BACKWARDS = ["DROP TRIGGER IF EXISTS bgtasks_record_run"]


def _run(statements_by_vendor: dict[str, list[str]]) -> Callable[..., None]:
    def run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRESQL_FORWARDS, "sqlite": SQLITE_FORWARDS}),
            _run({"postgresql": POSTGRESQL_BACKWARDS, "sqlite": SQLITE_BACKWARDS}),
            elidable=False,
        ),
    ]
