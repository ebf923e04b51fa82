"""Per-vendor storage for the lease table, which model fields can't express.

PostgreSQL: a fillfactor for HOT heartbeats. SQLite: the trigger that writes a
run's history row inside the statement that ends the run (PostgreSQL does that
with data-modifying CTEs in the statements themselves; SQLite has no such CTEs).

The SQL is this migration's entry in db/postgresql/schema.py and
db/sqlite/schema.py, which db/schema.py runs on the engine migrated: an entry
is what a released migration ran and is never edited, so the migration keeps
doing what it did when it was written.
"""

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0001_initial")]

    operations = [
        migrations.RunPython(
            schema.forwards("0002_lease_storage"),
            schema.backwards("0002_lease_storage"),
            elidable=False,
        ),
    ]
