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

The SQL is this migration's entry in db/sqlite/schema.py, which db/schema.py
runs on SQLite alone: an entry is what a released migration ran and is never
edited, so the migration keeps doing what it did when it was written.
"""

from __future__ import annotations

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0019_postgresql_claim_by_queue")]

    operations = [
        migrations.RunPython(
            schema.forwards("0020_sqlite_flow_slot_take"),
            schema.backwards("0020_sqlite_flow_slot_take"),
            elidable=False,
        )
    ]
