"""Runs gain the outcome ``timed-out``: a ``@background_task(timeout=S)``
run that went on past its timeout, by the database's clock (told at its next
``check()``/``update()``, or ended by its worker after the worker's grace).

Only the choices change (Django keeps them in the model state, not in the
database): no table is altered, so workers older than this migration, which
never write the value, go on during a rolling deploy.
"""

from django.db import migrations, models

OUTCOMES = [
    ("succeeded", "succeeded"),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
    ("lost", "lost"),
    ("released-by-operator", "released by operator"),
    ("interrupted", "interrupted"),
    ("timed-out", "timed out"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("django_bgtasks", "0013_flow_limits"),
    ]

    operations = [
        migrations.AlterField(
            model_name="backgroundtask",
            name="outcome",
            field=models.CharField(
                blank=True, choices=OUTCOMES, default="", max_length=32, verbose_name="outcome"
            ),
        ),
        migrations.AlterField(
            model_name="taskrun",
            name="outcome",
            field=models.CharField(choices=OUTCOMES, max_length=32, verbose_name="outcome"),
        ),
    ]
