"""Fair shares for Django Tasks (``@task(fairness_key=..., fairness_weight=...)``):
what the enqueue stores, the table of the keys' turns, and the claim's indexes.

* ``QueuedTask`` gets ``fairness_key`` (NULL: no share of its own) and
  ``fairness_weight`` (NULL without a key). Both nullable without a default,
  so that SQLite adds each in place: a default makes Django rebuild the
  table there, without the indexes and triggers earlier migrations' SQL
  made. A release before this one, enqueueing beside it during a deploy,
  stores NULLs: tasks without a share.
* ``FairShare``: a key's turn in a queue (its ``vtime``, and ``turn``, where
  its latest began), one row per queue and key.
* MySQL/MariaDB: the keys compare byte for byte (``utf8mb4_bin``), as 0013
  made the flow limits' keys.
* PostgreSQL: the ready tasks split between two partial indexes, those with
  a key (by queue, priority and key: the claim's turns) and those without
  (the claim's scan of them beside keyed ones), built ``CONCURRENTLY``; and a
  trigger once a statement that makes the rows of keys not seen before.

The SQL is this migration's entry in each engine's db/<engine>/schema.py,
which db/schema.py runs on the engine migrated.
"""

from __future__ import annotations

from django.db import migrations, models

from django_bgtasks.db import schema


class Migration(migrations.Migration):
    # MySQL can't roll DDL back, and Django refuses DDL in a transaction there.
    atomic = False

    dependencies = [
        ("django_bgtasks", "0027_finished_by_time"),
    ]

    operations = [
        migrations.AddField(
            model_name="queuedtask",
            name="fairness_key",
            field=models.CharField(
                blank=True, max_length=255, null=True, verbose_name="fairness key"
            ),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="fairness_weight",
            field=models.IntegerField(blank=True, null=True, verbose_name="fairness weight"),
        ),
        migrations.CreateModel(
            name="FairShare",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("queue_name", models.CharField(max_length=100, verbose_name="queue")),
                ("fairness_key", models.CharField(max_length=255, verbose_name="key")),
                ("vtime", models.FloatField(blank=True, null=True, verbose_name="next turn")),
                ("turn", models.FloatField(blank=True, null=True, verbose_name="latest turn")),
                (
                    "started_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last turn"),
                ),
            ],
            options={
                "verbose_name": "fair share",
                "verbose_name_plural": "fair shares",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue_name", "fairness_key"), name="bgtasks_fair_share"
                    )
                ],
                "indexes": [
                    models.Index(fields=["queue_name", "turn"], name="bgtasks_fair_share_turn")
                ],
            },
        ),
        migrations.RunPython(
            schema.forwards("0028_fair_shares"),
            schema.backwards("0028_fair_shares"),
            elidable=False,
        ),
    ]
