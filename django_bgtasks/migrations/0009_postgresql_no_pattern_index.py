"""PostgreSQL: drop the ``varchar_pattern_ops`` index Django adds beside a
``CharField`` primary key, on the lease table and the workers' table.

Django creates it so that ``name__startswith`` can use an index. Nothing here
filters that way (the lease statements look names up by equality, which the
primary key serves, and the admin's search is ``icontains``, which no btree
index serves), so the index only made every new row cost one more index
entry. Its name is Django's hash, so it is found by what it is, not by name.
Reversing it recreates the index as Django would have.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TABLES = {"BackgroundTask": "name", "Worker": "id"}

FIND = """
    SELECT index_class.relname
    FROM pg_index i
    JOIN pg_class index_class ON index_class.oid = i.indexrelid
    JOIN pg_opclass opclass ON opclass.oid = ANY(i.indclass::oid[])
    WHERE i.indrelid = %s::regclass
        AND opclass.opcname IN ('varchar_pattern_ops', 'text_pattern_ops')
"""


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    editor: Any = schema_editor  # its index methods are untyped in django-stubs
    for model_name in TABLES:
        model = apps.get_model("django_bgtasks", model_name)
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(FIND, [schema_editor.quote_name(model._meta.db_table)])
            names = [row[0] for row in cursor.fetchall()]
        for name in names:
            schema_editor.execute(editor._delete_index_sql(model, name))


def recreate(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    editor: Any = schema_editor  # the PostgreSQL schema editor's own method
    for model_name, field_name in TABLES.items():
        model = apps.get_model("django_bgtasks", model_name)
        field = model._meta.get_field(field_name)
        statement = editor._create_like_index_sql(model, field)
        if statement is not None:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("django_bgtasks", "0008_postgresql_change_notifications")]

    operations = [migrations.RunPython(drop, recreate, elidable=False)]
