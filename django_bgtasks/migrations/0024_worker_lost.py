"""A worker's row lists the Django Tasks taken back from it once it was lost:
``Worker.lost``.

A killed worker's Django Tasks leave its hands when a live worker's
recovery puts them back in the queue (or fails them); the row's ``owner``
then names no one, so without this list nothing would say which tasks that
worker had. The recovering worker appends their ids. The column is
nullable: workers older than this migration, still running during a
rolling deploy, insert their rows without it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_bgtasks", "0023_postgresql_finished_by_status"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="lost",
            field=models.JSONField(blank=True, null=True, verbose_name="Django Tasks lost"),
        ),
    ]
