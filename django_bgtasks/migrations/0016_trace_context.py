"""Where each piece of work was filed from, for OpenTelemetry:
``BackgroundTask.trace_context`` and ``QueuedTask.trace_context``.

An enqueue and a background task's request store the W3C trace context of
their producer span (django_bgtasks.tracing), and the run's span continues
that trace in the worker's process. Empty where nothing was traced: rows
from before this migration, and sites without an OpenTelemetry SDK. The
database default covers the statements of an older release during a rolling
deploy, which don't write the column.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_bgtasks", "0012_mysql_queue"),
    ]

    operations = [
        migrations.AddField(
            model_name="backgroundtask",
            name="trace_context",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=568, verbose_name="trace context"
            ),
        ),
        migrations.AddField(
            model_name="queuedtask",
            name="trace_context",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=568, verbose_name="trace context"
            ),
        ),
    ]
