"""Where each piece of work was filed from, for OpenTelemetry:
``BackgroundTask.trace_context`` and ``QueuedTask.trace_context``.

An enqueue and a background task's request store the W3C trace context of
their producer span (django_bgtasks.tracing), and the run's span continues
that trace in the worker's process. NULL where nothing was traced: rows from
before this migration, the statements of an older release during a rolling
deploy, and sites without an OpenTelemetry SDK. Nullable and without a
default, each column is added in place on every vendor: SQLite rebuilds a
table to add a NOT NULL column, which would copy the whole queue and drop the
lease table's history trigger (0005's).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_bgtasks", "0015_pause"),
    ]

    operations = [
        migrations.AddField(
            model_name="backgroundtask",
            name="trace_context",
            field=models.CharField(
                blank=True, max_length=568, null=True, verbose_name="trace context"
            ),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="trace_context",
            field=models.CharField(
                blank=True, max_length=568, null=True, verbose_name="trace context"
            ),
        ),
    ]
