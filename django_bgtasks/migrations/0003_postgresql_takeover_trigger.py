"""PostgreSQL: record a taken-over run as lost, from a trigger.

A claim is a plain upsert. When it takes over a running (stale) lease, the
row's token changes, and this trigger writes the run it replaced to history
as ``lost``, as of its last heartbeat, inside the claim's own statement. Only
a trigger sees the exact row an upsert replaces; migration 0002's trigger does
the same on SQLite. (Releases, force releases and expiries write history with
a CTE in their own statement; see sql.py.)

The SQL is this migration's entry in db/postgresql/schema.py, which
db/schema.py runs on PostgreSQL alone: an entry is what a released migration
ran and is never edited, so the migration keeps doing what it did when it was
written.
"""

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0002_lease_storage")]

    operations = [
        migrations.RunPython(
            schema.forwards("0003_postgresql_takeover_trigger"),
            schema.backwards("0003_postgresql_takeover_trigger"),
            elidable=False,
        ),
    ]
