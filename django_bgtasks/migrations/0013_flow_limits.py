"""Flow limits for Django Tasks (``@task(concurrency=N)``, ``rate_limit="N/s"``):
the keys and limits of each queued task, the slot table the claim takes them
from, and the triggers that keep the slots.

* ``QueuedTask`` gets ``concurrency_key``, ``concurrency``, ``rate_key``,
  ``rate_limit`` and ``rate_period``, written by the enqueue (NULL: no limit).
* ``FlowSlot``: N rows per key and kind, one per slot (db/shared.py says how
  the claim takes them).
* On every vendor, a trigger creates a key's N slots when a task of it is
  inserted (unless slot N exists already), and another gives a concurrency
  slot back when its task leaves ``RUNNING`` (finished, ready again,
  recovered) or its row is deleted while running: the statements that end a
  run need not know of the slots. On SQLite, where one writer runs at a time,
  a third takes the slots of each row the claim sets ``RUNNING`` (the claim
  counts the free slots first).
* PostgreSQL: an index in the claim's order (status, priority DESC, seq), as
  0012 made on MySQL, so that the claim reads ready rows in its order and
  stops at its limit.
* MySQL/MariaDB: the keys compare byte for byte (``utf8mb4_bin``), as 0012
  made the unique keys.

The SQL is written out here, not imported from db/: a migration must keep
doing what it did when it was written.
"""

from collections.abc import Callable

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

POSTGRESQL_FORWARDS = [
    # The claim's order, as 0012 gave it to MySQL: the claim reads the ready
    # rows in it and stops at its limit, so a row's flow test runs only on
    # the rows it reads, not on every ready row before a sort.
    """
    CREATE INDEX bgtasks_queued_claim
    ON django_bgtasks_queuedtask (status, priority DESC, seq)
    """,
    # The claim takes a rate key's oldest starts first (never started first).
    """
    CREATE INDEX bgtasks_flow_slot_started
    ON django_bgtasks_flowslot (kind, flow_key, started_at NULLS FIRST)
    """,
    """
    CREATE FUNCTION bgtasks_flow_slots_create() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency
        ) THEN
            INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
            SELECT 'concurrency', NEW.concurrency_key, n
            FROM generate_series(1, NEW.concurrency) n
            ON CONFLICT DO NOTHING;
        END IF;
        IF NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit
        ) THEN
            INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
            SELECT 'rate', NEW.rate_key, n FROM generate_series(1, NEW.rate_limit) n
            ON CONFLICT DO NOTHING;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
    EXECUTE FUNCTION bgtasks_flow_slots_create()
    """,
    """
    CREATE FUNCTION bgtasks_flow_slot_free() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
        WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
            AND seq = OLD.seq AND token = OLD.token;
        RETURN NULL;
    END
    $$
    """,
    # UPDATE OF status only: a heartbeat doesn't even consider it.
    """
    CREATE TRIGGER bgtasks_flow_slot_free
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING'
        AND OLD.concurrency_key IS NOT NULL)
    EXECUTE FUNCTION bgtasks_flow_slot_free()
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free_deleted
    AFTER DELETE ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (OLD.status = 'RUNNING' AND OLD.concurrency_key IS NOT NULL)
    EXECUTE FUNCTION bgtasks_flow_slot_free()
    """,
]
POSTGRESQL_BACKWARDS = [
    "DROP INDEX IF EXISTS bgtasks_queued_claim",
    "DROP INDEX IF EXISTS bgtasks_flow_slot_started",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free_deleted ON django_bgtasks_queuedtask",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free ON django_bgtasks_queuedtask",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_flow_slot_free()",
    "DROP FUNCTION IF EXISTS bgtasks_flow_slots_create()",
]

SQLITE_FORWARDS = [
    # (Ascending, NULLs sort first on SQLite and MySQL.)
    """
    CREATE INDEX bgtasks_flow_slot_started
    ON django_bgtasks_flowslot (kind, flow_key, started_at)
    """,
    # SQLite has no generate_series (and no WITH inside a trigger): N zeros as
    # a JSON array, whose keys are 0 to N - 1.
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    WHEN NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
        SELECT 'concurrency', NEW.concurrency_key, n.key + 1
        FROM json_each('[' || substr(replace(hex(zeroblob(NEW.concurrency)), '00', '0,'),
            1, 2 * NEW.concurrency - 1) || ']') n
        WHERE NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency);
        INSERT OR IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
        SELECT 'rate', NEW.rate_key, n.key + 1
        FROM json_each('[' || substr(replace(hex(zeroblob(NEW.rate_limit)), '00', '0,'),
            1, 2 * NEW.rate_limit - 1) || ']') n
        WHERE NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit);
    END
    """,
    # The claim's rows: the first free slot of each key (the claim made sure
    # there is one for each row it claims); the same 'now' as the claim's.
    """
    CREATE TRIGGER bgtasks_flow_slots_take
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    WHEN NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING'
        AND (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot
            WHERE kind = 'concurrency' AND flow_key = NEW.concurrency_key
                AND slot <= NEW.concurrency AND seq IS NULL
            ORDER BY slot LIMIT 1);
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token,
            started_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot
            WHERE kind = 'rate' AND flow_key = NEW.rate_key AND slot <= NEW.rate_limit
                AND (started_at IS NULL OR (julianday('now') - julianday(started_at))
                    * 86400.0 >= NEW.rate_period - 0.0005)
            ORDER BY started_at LIMIT 1);
    END
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    WHEN OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING'
        AND OLD.concurrency_key IS NOT NULL
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
        WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
            AND seq = OLD.seq AND token = OLD.token;
    END
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free_deleted
    AFTER DELETE ON django_bgtasks_queuedtask
    WHEN OLD.status = 'RUNNING' AND OLD.concurrency_key IS NOT NULL
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
        WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
            AND seq = OLD.seq AND token = OLD.token;
    END
    """,
]
SQLITE_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free_deleted",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_take",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create",
    "DROP INDEX IF EXISTS bgtasks_flow_slot_started",
]

# MySQL has no generate_series and no WHEN on a trigger: a loop, and an IF
# (its UPDATE trigger runs for every update, a heartbeat's too).
MYSQL_FORWARDS = [
    """
    ALTER TABLE django_bgtasks_queuedtask
    MODIFY concurrency_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    MODIFY rate_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
    """,
    """
    ALTER TABLE django_bgtasks_flowslot
    MODIFY flow_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
    """
    CREATE INDEX bgtasks_flow_slot_started
    ON django_bgtasks_flowslot (kind, flow_key, started_at)
    """,
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask FOR EACH ROW
    BEGIN
        DECLARE n INT DEFAULT 1;
        IF NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency
        ) THEN
            WHILE n <= NEW.concurrency DO
                INSERT IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
                VALUES ('concurrency', NEW.concurrency_key, n);
                SET n = n + 1;
            END WHILE;
        END IF;
        SET n = 1;
        IF NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit
        ) THEN
            WHILE n <= NEW.rate_limit DO
                INSERT IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
                VALUES ('rate', NEW.rate_key, n);
                SET n = n + 1;
            END WHILE;
        END IF;
    END
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free
    AFTER UPDATE ON django_bgtasks_queuedtask FOR EACH ROW
    BEGIN
        IF OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING'
            AND OLD.concurrency_key IS NOT NULL THEN
            UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
            WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
                AND seq = OLD.seq AND token = OLD.token;
        END IF;
    END
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free_deleted
    AFTER DELETE ON django_bgtasks_queuedtask FOR EACH ROW
    BEGIN
        IF OLD.status = 'RUNNING' AND OLD.concurrency_key IS NOT NULL THEN
            UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
            WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
                AND seq = OLD.seq AND token = OLD.token;
        END IF;
    END
    """,
]
MYSQL_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free_deleted",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create",
    "DROP INDEX bgtasks_flow_slot_started ON django_bgtasks_flowslot",
]


def _run(statements_by_vendor: dict[str, list[str]]) -> Callable[..., None]:
    def run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    # MySQL can't roll DDL back, and Django refuses DDL in a transaction there.
    atomic = False
    dependencies = [("django_bgtasks", "0012_mysql_queue")]

    operations = [
        migrations.AddField(
            model_name="queuedtask",
            name="concurrency",
            field=models.IntegerField(blank=True, null=True, verbose_name="concurrency limit"),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="concurrency_key",
            field=models.CharField(
                blank=True, max_length=255, null=True, verbose_name="concurrency key"
            ),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="rate_key",
            field=models.CharField(blank=True, max_length=255, null=True, verbose_name="rate key"),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="rate_limit",
            field=models.IntegerField(blank=True, null=True, verbose_name="starts per window"),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="rate_period",
            field=models.FloatField(blank=True, null=True, verbose_name="rate window (s)"),
        ),
        migrations.CreateModel(
            name="FlowSlot",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("kind", models.CharField(max_length=16, verbose_name="limit")),
                ("flow_key", models.CharField(max_length=255, verbose_name="key")),
                ("slot", models.IntegerField(verbose_name="slot")),
                (
                    "seq",
                    models.BigIntegerField(blank=True, null=True, verbose_name="held by task"),
                ),
                ("token", models.BigIntegerField(blank=True, null=True, verbose_name="token")),
                (
                    "started_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last start"),
                ),
            ],
            options={
                "verbose_name": "flow slot",
                "verbose_name_plural": "flow slots",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("kind", "flow_key", "slot"), name="bgtasks_flow_slot"
                    )
                ],
                "indexes": [
                    models.Index(
                        fields=["kind", "flow_key", "seq"], name="bgtasks_flow_slot_holder"
                    )
                ],
            },
        ),
        migrations.RunPython(
            _run(
                {
                    "postgresql": POSTGRESQL_FORWARDS,
                    "sqlite": SQLITE_FORWARDS,
                    "mysql": MYSQL_FORWARDS,
                }
            ),
            _run(
                {
                    "postgresql": POSTGRESQL_BACKWARDS,
                    "sqlite": SQLITE_BACKWARDS,
                    "mysql": MYSQL_BACKWARDS,
                }
            ),
            elidable=False,
        ),
    ]
