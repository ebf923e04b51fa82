"""The schema SQL the migrations install, run on the engine they migrate:
what a migration's ``RunPython`` calls, for every engine alike. Each
engine's SQL is in its package's ``schema`` module
(:mod:`~django_bgtasks.db.postgresql.schema`,
:mod:`~django_bgtasks.db.mysql.schema`,
:mod:`~django_bgtasks.db.sqlite.schema`), by migration (a
:class:`~django_bgtasks.db.driver.Steps` each); the engine is the one of the
connection the schema editor migrates (its driver's ``schema``), and an
engine without an entry for a migration runs nothing for it.

The rule: an entry is what a released migration ran, so it is never edited,
not even to fix a typo or follow a renamed column: a database migrated with
it has what it says, and one migrated later must get the same. A changed
trigger, function or index is a new entry, for a new migration (as 0004's
replaced 0003's, each written out in full). So each statement is written out
where a migration runs it, even where an earlier entry has the same text,
and names the statuses as its migration spelled them, not from choices.py.
tests/test_migrations.py pins the text of every entry: an edit fails there.
So a migration that names its entry does what it did when it was released,
as it did when its SQL was written out in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.utils.deconstruct import deconstructible

from django_bgtasks.db import engines
from django_bgtasks.db.driver import Steps

if TYPE_CHECKING:
    from django.db.backends.base.schema import BaseDatabaseSchemaEditor
    from django.db.migrations.state import StateApps

_NONE = Steps()


@deconstructible(path="django_bgtasks.db.schema.SchemaSQL")
class SchemaSQL:
    """``RunPython``'s code: the statements of migration ``step`` (its name,
    or ``<migration>:<step>``) on the engine of the connection it migrates,
    in order, forwards or ``backwards``. ``every_engine``: the migration has
    SQL for every engine django-bgtasks runs on, and refuses another
    (NotSupportedError). An object rather than a closure, so that a
    migration that runs it can be written out again (``squashmigrations``
    writes it as its arguments)."""

    def __init__(self, step: str, *, backwards: bool = False, every_engine: bool = False) -> None:
        self.step = step
        self.backwards = backwards
        self.every_engine = every_engine

    def __call__(self, apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        found = steps(schema_editor, self.step, every_engine=self.every_engine)
        for statement in found.backwards if self.backwards else found.forwards:
            schema_editor.execute(statement)


def forwards(step: str, *, every_engine: bool = False) -> SchemaSQL:
    """``RunPython``'s code for migration ``step``: its statements forwards
    (:class:`SchemaSQL`)."""
    return SchemaSQL(step, every_engine=every_engine)


def backwards(step: str, *, every_engine: bool = False) -> SchemaSQL:
    """``RunPython``'s reverse code for migration ``step``: its statements
    backwards (:class:`SchemaSQL`)."""
    return SchemaSQL(step, backwards=True, every_engine=every_engine)


def drop_pattern_indexes(
    step: str,
    apps: StateApps,
    schema_editor: BaseDatabaseSchemaEditor,
    models: Sequence[str],
    *,
    quoted: bool,
) -> None:
    """Drop the ``varchar_pattern_ops`` indexes Django adds beside a
    ``CharField`` on the tables of ``models`` (this app's model names), where
    migration ``step`` has a query of them on the connection's engine
    (``Steps.pattern_indexes``: PostgreSQL's): found by what they are, each
    table given to the query by its name, ``quoted`` or as it is."""
    query = steps(schema_editor, step).pattern_indexes
    if not query:
        return
    editor: Any = schema_editor  # its index methods are untyped in django-stubs
    for model_name in models:
        model = apps.get_model("django_bgtasks", model_name)
        table = model._meta.db_table
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(query, [schema_editor.quote_name(table) if quoted else table])
            names = [row[0] for row in cursor.fetchall()]
        for name in names:
            schema_editor.execute(editor._delete_index_sql(model, name))


def create_pattern_indexes(
    step: str,
    apps: StateApps,
    schema_editor: BaseDatabaseSchemaEditor,
    fields: Mapping[str, str],
) -> None:
    """Create again, as Django would have, the pattern indexes
    :func:`drop_pattern_indexes` dropped for migration ``step``: one beside
    each of ``fields`` (model name: field name), on the engines it drops them."""
    if not steps(schema_editor, step).pattern_indexes:
        return
    editor: Any = schema_editor  # the PostgreSQL schema editor's own method
    for model_name, field_name in fields.items():
        model = apps.get_model("django_bgtasks", model_name)
        field = model._meta.get_field(field_name)
        statement = editor._create_like_index_sql(model, field)
        if statement is not None:
            schema_editor.execute(statement)


def steps(
    schema_editor: BaseDatabaseSchemaEditor, step: str, *, every_engine: bool = False
) -> Steps:
    """What migration ``step`` runs on the engine ``schema_editor`` migrates:
    nothing on an engine without an entry for it, nor (but with
    ``every_engine``, which refuses it) on one django-bgtasks doesn't run on."""
    connection = schema_editor.connection
    engine = engines.driver(connection) if every_engine else engines.driver_or_none(connection)
    if engine is None:
        return _NONE
    return engine.schema.get(step, _NONE)
