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

The SQL is this migration's entry in db/postgresql/schema.py and
db/sqlite/schema.py, which db/schema.py runs on the engine migrated: an entry
is what a released migration ran and is never edited, so the migration keeps
doing what it did when it was written.
"""

from __future__ import annotations

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    # In one transaction on PostgreSQL and SQLite: the new trigger and the old
    # one's drop commit together.
    atomic = True
    dependencies = [("django_bgtasks", "0021_queue_list_indexes")]

    operations = [
        migrations.RunPython(
            schema.forwards("0022_flow_slots_made_once"),
            schema.backwards("0022_flow_slots_made_once"),
            elidable=False,
        )
    ]
