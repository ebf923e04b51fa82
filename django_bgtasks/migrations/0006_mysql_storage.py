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

The SQL is this migration's entry in db/mysql/schema.py, which db/schema.py
runs on MySQL and MariaDB alone: an entry is what a released migration ran and
is never edited, so the migration keeps doing what it did when it was written.
(Creating a trigger with binary logging on needs the TRIGGER privilege and,
for a user without SUPER, ``log_bin_trust_function_creators``;
docs/install.md.)
"""

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    # MySQL can't roll DDL back, and Django refuses DDL in a transaction there.
    atomic = False
    dependencies = [("django_bgtasks", "0005_results")]

    operations = [
        migrations.RunPython(
            schema.forwards("0006_mysql_storage"),
            schema.backwards("0006_mysql_storage"),
            elidable=False,
        ),
    ]
