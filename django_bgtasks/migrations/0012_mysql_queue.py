"""MySQL and MariaDB: the Django Tasks queue's unique keys compare byte for
byte, and an index gives the claim its order without a sort.

Nothing happens on the other vendors.

* **Unique keys compare byte for byte.** MySQL's default collations ignore
  case (and accents, trailing spaces), so the unique index on ``active_key``
  would take "Report" and "report" for one key. ``unique_key`` and
  ``active_key`` get ``utf8mb4_bin``, as PostgreSQL and SQLite compare them
  (as 0006 did for the lease names). 255 characters of utf8mb4 are 1,020
  bytes, inside InnoDB's 3,072-byte key limit. (``utf8mb4_bin`` still ignores
  trailing spaces: "report" and "report " are one key; the NO PAD binary
  collations are named differently on MySQL and MariaDB.)
* **The claim reads only the rows it takes.** The claim's ``SELECT ... ORDER
  BY priority DESC, seq LIMIT n FOR UPDATE SKIP LOCKED`` locks every row it
  reads, and with a sort it reads (and locks) every ready row: a concurrent
  claim then finds them all locked, and takes none. With this index (the
  order of the claim, DESC where it is) it reads them in order and stops at
  ``n``. MySQL 8.0 and MariaDB 10.8+ keep the DESC; MariaDB 10.6 and 10.7
  parse it and build an ascending index, which the claim can't use for its
  order (docs/django-tasks.md).

The SQL is this migration's entry in db/mysql/schema.py, which db/schema.py
runs on MySQL and MariaDB alone: an entry is what a released migration ran and
is never edited, so the migration keeps doing what it did when it was written.
"""

from django.db import migrations

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    # MySQL can't roll DDL back, and Django refuses DDL in a transaction there.
    atomic = False
    dependencies = [("django_bgtasks", "0011_worker_ttl")]

    operations = [
        migrations.RunPython(
            schema.forwards("0012_mysql_queue"),
            schema.backwards("0012_mysql_queue"),
            elidable=False,
        ),
    ]
