"""PostgreSQL: drop the ``varchar_pattern_ops`` index Django adds beside a
``CharField`` primary key, on the lease table and the workers' table.

Django creates it so that ``name__startswith`` can use an index. Nothing here
filters that way (the lease statements look names up by equality, which the
primary key serves, and the admin's search is ``icontains``, which no btree
index serves), so the index only made every new row cost one more index
entry. Its name is Django's hash, so it is found by what it is, not by name.
Reversing it recreates the index as Django would have.

The query that finds it is this migration's entry in db/postgresql/schema.py,
and db/schema.py drops and recreates the indexes where the engine has one
(PostgreSQL alone): an entry is what a released migration ran and is never
edited, so the migration keeps doing what it did when it was written.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from django_bgtasks.db import schema

STEP = "0009_postgresql_no_pattern_index"
TABLES = {"BackgroundTask": "name", "Worker": "id"}


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema.drop_pattern_indexes(STEP, apps, schema_editor, list(TABLES), quoted=True)


def recreate(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema.create_pattern_indexes(STEP, apps, schema_editor, TABLES)


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0008_postgresql_change_notifications")]

    operations = [migrations.RunPython(drop, recreate, elidable=False)]
