"""Pause: a background task's pause on its lease row, and the paused queues.

* ``BackgroundTask.paused_at`` (NULL when not paused) and ``paused_skipped``
  (the schedule's slots skipped while paused, handed to the next run's
  ``skipped`` by its claim).
* On PostgreSQL, 0008's change trigger watches the two new columns too.
* ``PausedQueue``: one row per Django Tasks queue name that no worker claims
  from. On MySQL/MariaDB its name compares byte for byte (``utf8mb4_bin``),
  as PostgreSQL and SQLite compare it: "Emails" and "emails" are two queues.

On SQLite, adding a NOT NULL column rebuilds the lease table, which drops its
history trigger: 0005's trigger is created again after the columns, word for
word (as 0005 did for 0004's). Backwards, the trigger is dropped first and
created again once the columns are gone. The SQL is this migration's entries
in db/postgresql/schema.py, db/sqlite/schema.py and db/mysql/schema.py, which
db/schema.py runs on the engine migrated: an entry is what a released
migration ran and is never edited, so the migration keeps doing what it did
when it was written.
"""

from django.db import migrations, models
from django.db.models.functions import Now

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    dependencies = [
        ("django_bgtasks", "0014_timeouts"),
    ]

    operations = [
        # Backwards this runs last, after the columns are gone.
        migrations.RunPython(
            migrations.RunPython.noop, schema.backwards("0015_pause:restore_0005"), elidable=False
        ),
        migrations.AddField(
            model_name="backgroundtask",
            name="paused_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="paused"),
        ),
        migrations.AddField(
            model_name="backgroundtask",
            name="paused_skipped",
            field=models.IntegerField(
                db_default=0, default=0, verbose_name="slots skipped while paused"
            ),
        ),
        migrations.RunPython(
            schema.forwards("0015_pause"),
            schema.backwards("0015_pause"),
            elidable=False,
        ),
        migrations.CreateModel(
            name="PausedQueue",
            fields=[
                (
                    "queue_name",
                    models.CharField(
                        max_length=100, primary_key=True, serialize=False, verbose_name="queue"
                    ),
                ),
                ("paused_at", models.DateTimeField(db_default=Now(), verbose_name="paused")),
            ],
            options={
                "verbose_name": "paused queue",
                "verbose_name_plural": "paused queues",
                "ordering": ["queue_name"],
            },
        ),
        migrations.RunPython(
            schema.forwards("0015_pause:paused_queue"), migrations.RunPython.noop, atomic=False
        ),
    ]
