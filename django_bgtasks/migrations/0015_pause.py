"""Pause: a background task's pause on its lease row, and the paused queues.

* ``BackgroundTask.paused_at`` (NULL when not paused) and ``paused_skipped``
  (the schedule's slots skipped while paused, handed to the next run's
  ``skipped`` by its claim).
* On PostgreSQL, 0008's change trigger watches the two new columns too.
* ``PausedQueue``: one row per Django Tasks queue name that no worker claims
  from. On MySQL/MariaDB its name compares byte for byte (``utf8mb4_bin``),
  as PostgreSQL and SQLite compare it: "Emails" and "emails" are two queues.

On SQLite, adding a NOT NULL column rebuilds the lease table, which drops
its history trigger: 0005's trigger is created again after the columns,
word for word (as 0005 did for 0004's; the SQL is written out here: a
migration keeps doing what it did when written). Backwards, the trigger is
dropped first and created again once the columns are gone.
"""

from collections.abc import Callable

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models.functions import Now

# 0005's trigger, word for word.
SQLITE_TRIGGER = [
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE OF running, token ON django_bgtasks_backgroundtask
    WHEN OLD.running AND (NOT NEW.running OR NEW.token <> OLD.token)
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value,
             trigger, attempt, scheduled_for, skipped, result, result_note)
        SELECT OLD.name, OLD.token, OLD.owner, OLD.started_at,
            CASE WHEN NEW.token <> OLD.token THEN OLD.updated_at ELSE NEW.finished_at END,
            CASE WHEN NEW.token <> OLD.token THEN 'lost' ELSE NEW.outcome END,
            CASE WHEN NEW.token <> OLD.token
                THEN 'lease expired; taken over by ' || NEW.owner ELSE NEW.error END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.value ELSE NEW.value END,
            OLD.trigger, OLD.attempt, OLD.scheduled_for,
            CASE WHEN NEW.token <> OLD.token THEN OLD.skipped ELSE NEW.skipped END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.result ELSE NEW.result END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.result_note ELSE NEW.result_note END;
    END
    """,
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS bgtasks_record_run"]
# PostgreSQL: 0008's change trigger names the columns it watches, so that a
# heartbeat never fires it; the new ones are added (a pause and an unpause
# are announced: the admin's page follows them, and an unpause wakes the
# idle workers of the task, which claim what it owed at once).
_DROP_NOTIFY_UPDATE = (
    "DROP TRIGGER IF EXISTS bgtasks_notify_update ON django_bgtasks_backgroundtask"
)
POSTGRESQL_FORWARDS = [
    _DROP_NOTIFY_UPDATE,
    """
    CREATE TRIGGER bgtasks_notify_update
    AFTER UPDATE OF name, value, running, owner, token, ttl, started_at, finished_at,
        cancel_requested, outcome, error, attempt, next_run_at, request, requested_at,
        requested_by, run_args, schedule, scheduled_for, skipped, trigger, result, result_note,
        paused_at, paused_skipped
    ON django_bgtasks_backgroundtask
    FOR EACH ROW EXECUTE FUNCTION bgtasks_notify_change()
    """,
]
# 0008's, word for word.
POSTGRESQL_BACKWARDS = [
    _DROP_NOTIFY_UPDATE,
    """
    CREATE TRIGGER bgtasks_notify_update
    AFTER UPDATE OF name, value, running, owner, token, ttl, started_at, finished_at,
        cancel_requested, outcome, error, attempt, next_run_at, request, requested_at,
        requested_by, run_args, schedule, scheduled_for, skipped, trigger, result, result_note
    ON django_bgtasks_backgroundtask
    FOR EACH ROW EXECUTE FUNCTION bgtasks_notify_change()
    """,
]
MYSQL_FORWARDS = [
    """
    ALTER TABLE django_bgtasks_pausedqueue
    MODIFY queue_name varchar(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
]


def _run(statements_by_vendor: dict[str, list[str]]) -> Callable[..., None]:
    def run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("django_bgtasks", "0014_timeouts"),
    ]

    operations = [
        # Backwards this runs last, after the columns are gone.
        migrations.RunPython(
            migrations.RunPython.noop, _run({"sqlite": SQLITE_TRIGGER}), elidable=False
        ),
        migrations.AddField(
            model_name="backgroundtask",
            name="paused_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="paused"),
        ),
        migrations.AddField(
            model_name="backgroundtask",
            name="paused_skipped",
            field=models.IntegerField(
                db_default=0, default=0, verbose_name="slots skipped while paused"
            ),
        ),
        migrations.RunPython(
            _run({"sqlite": SQLITE_TRIGGER, "postgresql": POSTGRESQL_FORWARDS}),
            _run({"sqlite": SQLITE_DROP, "postgresql": POSTGRESQL_BACKWARDS}),
            elidable=False,
        ),
        migrations.CreateModel(
            name="PausedQueue",
            fields=[
                (
                    "queue_name",
                    models.CharField(
                        max_length=100, primary_key=True, serialize=False, verbose_name="queue"
                    ),
                ),
                ("paused_at", models.DateTimeField(db_default=Now(), verbose_name="paused")),
            ],
            options={
                "verbose_name": "paused queue",
                "verbose_name_plural": "paused queues",
                "ordering": ["queue_name"],
            },
        ),
        migrations.RunPython(
            _run({"mysql": MYSQL_FORWARDS}), migrations.RunPython.noop, atomic=False
        ),
    ]
