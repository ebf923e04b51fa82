"""A key's flow slots: on PostgreSQL made once a statement, not once a row;
on SQLite looked for before the trigger builds them.

0013's trigger ran for each row that had a key: a call of its function and,
for each of its keys, a look-up of the key's last slot (slot N). So an
``enqueue_many()`` of 10,000 limited tasks ran it 10,000 times, for one key.
Worse, the look-up asked for (kind, flow_key, slot) in a WHERE, and the
planner could answer it from either of the slot table's two indexes led by
(kind, flow_key): the unique one, which has ``slot`` too, or the one on the
slots' holder (kind, flow_key, seq), which doesn't. On a table without
statistics it took the second, and read every slot of the key for each row:
1.5 ms a look-up for a key of 10,000 slots, 3 ms a task with both limits,
about 300 tasks a second (docs/benchmarks.md, "Flow limits").

This trigger runs once a statement, over the rows it inserted (a transition
table): for each distinct key and limit among them, it inserts slot N with
``ON CONFLICT DO NOTHING``, so the unique index itself is the look-up, with
no plan to choose; where that made slot N, the key is new (or its limit was
raised), and slots 1 to N - 1 follow, those already there left alone (in
the order of the keys, so that two statements making the same new keys wait
for each other rather than deadlock). A key
seen before costs its statement one probe of the unique index, whatever the
number of rows; a single ``enqueue()`` one probe a key, as before.

Unlike 0013's, it runs for every INSERT, tasks without limits too (a
statement trigger has no ``WHEN``), and PostgreSQL keeps each statement's
rows for it: a statement without a key returns at once. Measured on the
development machine (5,000 single-row INSERTs, and one of 10,000 rows,
without limits, trigger on against off): about 6-15 µs more a single-row
INSERT (an ``enqueue()`` takes 650 µs or so, its commit most of it), and
no difference the noise shows for 10,000; without that early return, 20 µs
and 5 µs a row (docs/benchmarks.md, "Flow limits").

Deploy-safe: a statement of either release inserts rows the same way, and
either release's keys get their slots from this trigger. The new trigger is
created before the old one is dropped, in one transaction: no insert runs
between them without one (and for a statement that sees both, each would
make the slots, the second finding them there).

The SQL is written out here, not imported from db/: a migration must keep
doing what it did when it was written.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

FORWARDS = [
    """
    CREATE FUNCTION bgtasks_flow_slots_made() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT EXISTS (
            SELECT FROM bgtasks_inserted
            WHERE concurrency_key IS NOT NULL OR rate_key IS NOT NULL
        ) THEN
            RETURN NULL;
        END IF;
        WITH wanted AS (
            SELECT 'concurrency' AS kind, concurrency_key AS flow_key, concurrency AS slots
            FROM bgtasks_inserted WHERE concurrency_key IS NOT NULL
            UNION
            SELECT 'rate', rate_key, rate_limit
            FROM bgtasks_inserted WHERE rate_key IS NOT NULL
        ), last AS (
            INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
            SELECT kind, flow_key, slots FROM wanted ORDER BY kind, flow_key, slots
            ON CONFLICT DO NOTHING
            RETURNING kind, flow_key, slot
        )
        INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
        SELECT last.kind, last.flow_key, n
        FROM last CROSS JOIN LATERAL generate_series(1, last.slot - 1) n
        ON CONFLICT DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER bgtasks_flow_slots_made
    AFTER INSERT ON django_bgtasks_queuedtask
    REFERENCING NEW TABLE AS bgtasks_inserted
    FOR EACH STATEMENT EXECUTE FUNCTION bgtasks_flow_slots_made()
    """,
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_flow_slots_create()",
]
# 0013's trigger, as it was.
BACKWARDS = [
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
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_made ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_flow_slots_made()",
]


# SQLite has no statement triggers: 0013's trigger, the same body, now run
# only when a key of the row lacks its slot N. 0013's ran its body for every
# row with a key, and SQLite built each limit's JSON array of N numbers
# before the look-up that found the slots there: 1.1 ms a row for two keys
# of 10,000 slots (about 700 tasks a second, against 16,000 without limits).
# The trigger's body, both ways: insert the slots of each key of the row
# that lacks its slot N (the WHEN, which differs, says when it runs).
_SQLITE_BODY = """    BEGIN
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
"""
SQLITE_FORWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create",
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    WHEN (NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency))
        OR (NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit))
"""
    + _SQLITE_BODY
    + "    ",
]
# 0013's, as it was.
SQLITE_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create",
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    WHEN NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL
"""
    + _SQLITE_BODY
    + "    ",
]


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    statements = {"postgresql": FORWARDS, "sqlite": SQLITE_FORWARDS}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    statements = {"postgresql": BACKWARDS, "sqlite": SQLITE_BACKWARDS}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    # In one transaction on PostgreSQL and SQLite: the new trigger and the old
    # one's drop commit together.
    atomic = True
    dependencies = [("django_bgtasks", "0021_queue_list_indexes")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
