"""The cursor the lease statements run on: prepared statements on PostgreSQL.

Django's PostgreSQL backend binds parameters on the client and turns psycopg's
prepared statements off (``prepare_threshold = None``), so that connection
poolers keep working. Every lease statement would then be parsed and planned
on each call, which costs more than its execution (docs/benchmarks.md). So on
PostgreSQL with psycopg 3 the statements run on a server-side-binding cursor
that prepares each one on its first call, on the connection Django opened,
wrapped in Django's own ``CursorWrapper`` (``connection.make_cursor()``):
``execute_wrapper()`` hooks, ``connection.queries`` and the translation of
driver errors into ``django.db`` ones see these statements like any other.
The site's own queries are untouched.

``BGTASKS_PREPARED_STATEMENTS`` decides (docs/settings.md): ``None`` (the
default) prepares unless the database's settings say a transaction-pooling
PgBouncer is in front (``DISABLE_SERVER_SIDE_CURSORS``, which Django's docs
tell those sites to set): before 1.21 it can't hold prepared statements.
``True`` and ``False`` force it. Elsewhere (SQLite, MySQL, psycopg 2) this is
Django's plain cursor.
"""

from __future__ import annotations

import functools
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .conf import conf

# The cursor is kept on the Django connection object (one per thread and
# alias), under this name, with the driver connection it was made for: a
# reconnect gets a new one.
_ATTRIBUTE = "_bgtasks_prepared_cursor"
_NEVER_BY_COUNT = 2**62


def prepares(connection: BaseDatabaseWrapper) -> bool:
    """Whether the lease statements run as prepared statements on ``connection``."""
    if connection.vendor != "postgresql" or _preparing_cursor_class() is None:
        return False
    setting = conf.PREPARED_STATEMENTS
    if setting is not None:
        return bool(setting)
    return not behind_transaction_pooling(connection)


def behind_transaction_pooling(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection``'s settings say a transaction-pooling PgBouncer is
    in front (``DISABLE_SERVER_SIDE_CURSORS``, as Django's docs ask of such
    sites): each transaction may then run on another server connection, so
    nothing that lives in a session (a prepared statement, a ``LISTEN``) lasts."""
    return bool(connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS", False))


def fetch_all(connection: BaseDatabaseWrapper, query: str, params: dict[str, Any]) -> list[Any]:
    """Execute one of the app's statements on ``connection`` and return its
    rows: prepared where :func:`prepares`, else on Django's plain cursor."""
    if prepares(connection):
        # Not closed: the connection's prepared-statement cursor, kept for
        # the next statement.
        cursor = prepared_cursor(connection)
        cursor.execute(query, params)
        return list(cursor.fetchall())
    with connection.cursor() as plain:
        plain.execute(query, params)
        return list(plain.fetchall())


def prepared_cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """The cursor for a lease statement on ``connection``, where
    :func:`prepares`; the same one each time, so don't close it."""
    # What connection.cursor() does around making the driver's cursor.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = connection.connection
    cached = getattr(connection, _ATTRIBUTE, None)
    if cached is None or cached.connection is not raw or cached.closed:
        with connection.wrap_database_errors:
            cached = _preparing_cursor(connection)
        setattr(connection, _ATTRIBUTE, cached)
    if connection.queries_logged:
        debug_wrapper: type[CursorWrapper] = _debug_wrapper_class()
        return debug_wrapper(cached, connection)
    return connection.make_cursor(cached)


@functools.cache
def _preparing_cursor_class() -> type[Any] | None:
    """Django's server-binding cursor class, made to prepare each statement
    on its first execution whatever the connection's ``prepare_threshold``
    (Django sets none); ``None`` without psycopg 3."""
    try:
        from django.db.backends.postgresql.base import ServerBindingCursor
    except (ImportError, ImproperlyConfigured):  # psycopg 2, or no driver at all
        return None

    base: Any = ServerBindingCursor  # untyped in django-stubs

    class PreparingCursor(base):  # type: ignore[misc]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs.setdefault("prepare", True)
            return super().execute(query, params, **kwargs)

    return PreparingCursor


@functools.cache
def _debug_wrapper_class() -> type[Any]:
    """Django's PostgreSQL debug wrapper, logging each statement with its
    values. Django reads that text back from a client-binding cursor, unless
    the alias binds on the server; a prepared execution leaves none to read
    (``connection.queries`` would show ``None``), so it is composed here as
    Django composes it for server-side binding."""
    from django.db.backends.postgresql.base import CursorDebugWrapper

    class ComposingDebugWrapper(CursorDebugWrapper):
        def execute(self, sql: Any, params: Any = None) -> Any:
            try:
                logged = self.db.ops.compose_sql(sql, params)
            except Exception:  # only the log's text is at stake: log the template
                logged = sql
            with self.debug_sql(logged):
                return CursorWrapper.execute(self, sql, params)

    return ComposingDebugWrapper


def _preparing_cursor(connection: BaseDatabaseWrapper) -> Any:
    from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    cursor_class = _preparing_cursor_class()
    assert cursor_class is not None
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django's default: psycopg then prepares nothing, even when asked.
        # A threshold no query reaches lets the explicit prepare=True of our
        # cursor through and still never prepares the site's own queries
        # (Django's client-binding cursors never prepare; a server-binding
        # one keeps executing unprepared).
        raw.prepare_threshold = _NEVER_BY_COUNT
    cursor = cursor_class(raw)
    # As Django's create_cursor(): times in the connection's time zone.
    loader = raw.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    if connection.timezone != loader.timezone:
        register_tzloader(connection.timezone, cursor)
    return cursor
