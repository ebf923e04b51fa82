"""MySQL and MariaDB: binary collation for task names, and the history trigger.

Nothing happens on the other vendors.

* **Names compare byte for byte.** MySQL's default collations ignore case
  (and accents, trailing spaces), so "Log-Cleanup" and "log-cleanup" would be
  one primary key. The name columns get ``utf8mb4_bin``, as PostgreSQL and
  SQLite compare them. 200 characters of utf8mb4 are 800 bytes, well inside
  InnoDB's 3072-byte key limit.
* **History in the statement that ends a run.** MySQL has no
  data-modifying CTEs and no ``RETURNING``, so, as on SQLite (0002, 0004,
  0005), a trigger writes the ``TaskRun`` row when a running lease stops
  running (release, force release, expiry) or is claimed with a new token
  (a takeover, recorded as lost as of its last heartbeat). MySQL triggers
  can't be limited to some columns or a ``WHEN``, so the test is inside.

The SQL is written out here, not imported from sql.py: a migration must keep
doing what it did when it was written. (Creating a trigger with binary logging
on needs the TRIGGER privilege and, for a user without SUPER,
``log_bin_trust_function_creators``; docs/install.md.)
"""

from collections.abc import Callable

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

MYSQL_FORWARDS = [
    """
    ALTER TABLE django_bgtasks_backgroundtask
    MODIFY name varchar(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
    """
    ALTER TABLE django_bgtasks_taskrun
    MODIFY name varchar(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE ON django_bgtasks_backgroundtask
    FOR EACH ROW
    BEGIN
        IF OLD.running AND NEW.token <> OLD.token THEN
            INSERT INTO django_bgtasks_taskrun
                (name, token, owner, started_at, finished_at, outcome, error, value,
                `trigger`, attempt, scheduled_for, skipped, result, result_note)
            VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, OLD.updated_at, 'lost',
                CONCAT('lease expired; taken over by ', NEW.owner), OLD.value,
                OLD.`trigger`, OLD.attempt, OLD.scheduled_for, OLD.skipped,
                OLD.result, OLD.result_note)
            ON DUPLICATE KEY UPDATE name = name;
        ELSEIF OLD.running AND NOT NEW.running THEN
            INSERT INTO django_bgtasks_taskrun
                (name, token, owner, started_at, finished_at, outcome, error, value,
                `trigger`, attempt, scheduled_for, skipped, result, result_note)
            VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, NEW.finished_at,
                NEW.outcome, NEW.error, NEW.value, OLD.`trigger`, OLD.attempt,
                OLD.scheduled_for, NEW.skipped, NEW.result, NEW.result_note)
            ON DUPLICATE KEY UPDATE name = name;
        END IF;
    END
    """,
]
MYSQL_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    # Back to the table's default collation.
    "ALTER TABLE django_bgtasks_taskrun MODIFY name varchar(200) NOT NULL",
    "ALTER TABLE django_bgtasks_backgroundtask MODIFY name varchar(200) NOT NULL",
]


def _run(statements_by_vendor: dict[str, list[str]]) -> Callable[..., None]:
    def run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    # MySQL can't roll DDL back, and Django refuses DDL in a transaction there.
    atomic = False
    dependencies = [("django_bgtasks", "0005_results")]

    operations = [
        migrations.RunPython(
            _run({"mysql": MYSQL_FORWARDS}),
            _run({"mysql": MYSQL_BACKWARDS}),
            elidable=False,
        ),
    ]
