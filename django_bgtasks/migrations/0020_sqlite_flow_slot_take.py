"""SQLite: the trigger that takes a claimed task's slots reads them from the
slots' indexes (``INDEXED BY``): the rate key's oldest start from the index on
their start, a free concurrency slot from the index on their holder.

0013's trigger asked for the rate key's slot whose last start is oldest
(``ORDER BY started_at LIMIT 1``) among those within the limit
(``slot <= limit``), and SQLite answered from the unique index on (kind,
flow_key, slot), the range of the limit, then sorted every slot of the key
by its start: with ``rate_limit="10000/s"``, 10,000 slots for each task
claimed, about 120,000 steps of SQLite's virtual machine a task (a claim of
8 took 970,000 steps where 6,400 do without the trigger). The index on
(kind, flow_key, started_at) holds them in that order, never-started first,
so the first slot within the limit is the one. Likewise a free concurrency
slot: 0013's took the lowest-numbered one (``ORDER BY slot``), reading past
every slot held before it; any free slot within the limit will do, and the
slots' index on their holder (kind, flow_key, seq) has the free ones
(``seq`` NULL) together, as the claim's count now reads them
(db/sqlite/leases.py).

The SQL is written out here, not imported from db/: a migration must keep
doing what it did when it was written.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# 0013's trigger, reading the slots from their indexes (written out in
# full, as a migration's SQL is: twice).
FORWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_take",
    """
    CREATE TRIGGER bgtasks_flow_slots_take
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    WHEN NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING'
        AND (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot INDEXED BY bgtasks_flow_slot_holder
            WHERE kind = 'concurrency' AND flow_key = NEW.concurrency_key
                AND seq IS NULL AND slot <= NEW.concurrency
            LIMIT 1);
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token,
            started_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot INDEXED BY bgtasks_flow_slot_started
            WHERE kind = 'rate' AND flow_key = NEW.rate_key AND slot <= NEW.rate_limit
                AND (started_at IS NULL OR (julianday('now') - julianday(started_at))
                    * 86400.0 >= NEW.rate_period - 0.0005)
            ORDER BY started_at LIMIT 1);
    END
    """,
]
# 0013's, as it was.
BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_take",
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
]


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for statement in FORWARDS:
            schema_editor.execute(statement)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for statement in BACKWARDS:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0019_postgresql_claim_by_queue")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
