"""PostgreSQL: a Django Task becoming ready notifies ``bgtasks_queue``.

A row of the queue table inserted or updated with ``status = 'READY'`` (an
``enqueue()``, a retry, a task recovered from a lost worker) notifies the
channel with JSON ``{"queue": ...}``, its queue's name. The workers' queue
threads listen through their process's change feed (django_bgtasks.changes)
and claim at once instead of at their next poll; a claim, a heartbeat and a
finish write another status, or none, and notify nobody. PostgreSQL delivers
the notification when the enqueuing transaction commits (so a task enqueued
inside ``transaction.atomic()`` wakes nobody before it can be claimed), never
for one that rolls back, and once per queue for the tasks one transaction
enqueues (identical payloads are folded into one).

SQLite and MySQL have no notifications: their queue threads poll.

The SQL is this migration's entry in db/postgresql/schema.py, which
db/schema.py runs on PostgreSQL alone: an entry is what a released migration
ran and is never edited, so the migration keeps doing what it did when it was
written.
"""

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0009_postgresql_no_pattern_index")]

    operations = [
        migrations.RunPython(
            schema.forwards("0010_postgresql_queue_notifications"),
            schema.backwards("0010_postgresql_queue_notifications"),
            elidable=False,
        ),
    ]
