"""PostgreSQL: record a taken-over run as lost, from a trigger.

A claim is a plain upsert. When it takes over a running (stale) lease, the
row's token changes, and this trigger writes the run it replaced to history
as ``lost``, as of its last heartbeat, inside the claim's own statement. Only
a trigger sees the exact row an upsert replaces; migration 0002's trigger does
the same on SQLite. (Releases, force releases and expiries write history with
a CTE in their own statement; see sql.py.)

The SQL is written out here, not imported from sql.py: a migration must keep
doing what it did when it was written.
"""

from collections.abc import Callable

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

POSTGRESQL_FORWARDS = [
    """
    CREATE FUNCTION bgtasks_record_takeover() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value)
        VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, OLD.updated_at, 'lost',
            'lease expired; taken over by ' || NEW.owner, OLD.value)
        ON CONFLICT (name, token) DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
    # UPDATE OF token: heartbeats and updates never set the token, so the
    # trigger isn't even considered for them.
    """
    CREATE TRIGGER bgtasks_record_takeover
    AFTER UPDATE OF token ON django_bgtasks_backgroundtask
    FOR EACH ROW WHEN (OLD.running AND NEW.token <> OLD.token)
    EXECUTE FUNCTION bgtasks_record_takeover()
    """,
]
POSTGRESQL_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_record_takeover ON django_bgtasks_backgroundtask",
    "DROP FUNCTION IF EXISTS bgtasks_record_takeover()",
]


def _run(statements_by_vendor: dict[str, list[str]]) -> Callable[..., None]:
    def run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0002_lease_storage")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRESQL_FORWARDS}),
            _run({"postgresql": POSTGRESQL_BACKWARDS}),
            elidable=False,
        ),
    ]
