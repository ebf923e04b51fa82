"""PostgreSQL: every change of a lease row notifies ``bgtasks_changes``.

A trigger, not a ``pg_notify`` in each statement, so that every lease
operation stays its one statement and round trip, and so that a write made
by hand (the admin, ``psql``) is announced too. The payload is JSON,
``{"name": ..., "token": ...}``; PostgreSQL delivers it when the writing
transaction commits, and never for one that rolls back.

A bare heartbeat (a write of ``updated_at`` alone) and a fence (a write of
nothing) notify nobody: they change nothing a watcher shows, and the
heartbeats of many leases would otherwise flood every listener. SQLite and
MySQL have no notifications; django_bgtasks.changes polls them instead.

The SQL is this migration's entry in db/postgresql/schema.py, which
db/schema.py runs on PostgreSQL alone: an entry is what a released migration
ran and is never edited, so the migration keeps doing what it did when it was
written.
"""

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0007_queued_tasks")]

    operations = [
        migrations.RunPython(
            schema.forwards("0008_postgresql_change_notifications"),
            schema.backwards("0008_postgresql_change_notifications"),
            elidable=False,
        ),
    ]
