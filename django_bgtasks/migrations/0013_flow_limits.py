"""Flow limits for Django Tasks (``@task(concurrency=N)``, ``rate_limit="N/s"``):
the keys and limits of each queued task, the slot table the claim takes them
from, and the triggers that keep the slots.

* ``QueuedTask`` gets ``concurrency_key``, ``concurrency``, ``rate_key``,
  ``rate_limit`` and ``rate_period``, written by the enqueue (NULL: no limit).
* ``FlowSlot``: N rows per key and kind, one per slot (db/shared.py says how
  the claim takes them).
* On every vendor, a trigger creates a key's N slots when a task of it is
  inserted (unless slot N exists already), and another gives a concurrency
  slot back when its task leaves ``RUNNING`` (finished, ready again,
  recovered) or its row is deleted while running: the statements that end a
  run need not know of the slots. On SQLite, where one writer runs at a time,
  a third takes the slots of each row the claim sets ``RUNNING`` (the claim
  counts the free slots first).
* PostgreSQL: an index in the claim's order (status, priority DESC, seq), as
  0012 made on MySQL, so that the claim reads ready rows in its order and
  stops at its limit.
* MySQL/MariaDB: the keys compare byte for byte (``utf8mb4_bin``), as 0012
  made the unique keys.

The SQL is this migration's entry in each engine's db/<engine>/schema.py,
which db/schema.py runs on the engine migrated: an entry is what a released
migration ran and is never edited, so the migration keeps doing what it did
when it was written.
"""

from django.db import migrations, models

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    # MySQL can't roll DDL back, and Django refuses DDL in a transaction there.
    atomic = False
    dependencies = [("django_bgtasks", "0012_mysql_queue")]

    operations = [
        migrations.AddField(
            model_name="queuedtask",
            name="concurrency",
            field=models.IntegerField(blank=True, null=True, verbose_name="concurrency limit"),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="concurrency_key",
            field=models.CharField(
                blank=True, max_length=255, null=True, verbose_name="concurrency key"
            ),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="rate_key",
            field=models.CharField(blank=True, max_length=255, null=True, verbose_name="rate key"),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="rate_limit",
            field=models.IntegerField(blank=True, null=True, verbose_name="starts per window"),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="rate_period",
            field=models.FloatField(blank=True, null=True, verbose_name="rate window (s)"),
        ),
        migrations.CreateModel(
            name="FlowSlot",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("kind", models.CharField(max_length=16, verbose_name="limit")),
                ("flow_key", models.CharField(max_length=255, verbose_name="key")),
                ("slot", models.IntegerField(verbose_name="slot")),
                (
                    "seq",
                    models.BigIntegerField(blank=True, null=True, verbose_name="held by task"),
                ),
                ("token", models.BigIntegerField(blank=True, null=True, verbose_name="token")),
                (
                    "started_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last start"),
                ),
            ],
            options={
                "verbose_name": "flow slot",
                "verbose_name_plural": "flow slots",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("kind", "flow_key", "slot"), name="bgtasks_flow_slot"
                    )
                ],
                "indexes": [
                    models.Index(
                        fields=["kind", "flow_key", "seq"], name="bgtasks_flow_slot_holder"
                    )
                ],
            },
        ),
        migrations.RunPython(
            schema.forwards("0013_flow_limits"),
            schema.backwards("0013_flow_limits"),
            elidable=False,
        ),
    ]
