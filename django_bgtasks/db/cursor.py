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
default) prepares only on a connection that has proved it talks to its
PostgreSQL backend directly (:func:`direct_session`), so that its session
lasts from one transaction to the next. Behind a transaction-pooling
PgBouncer, RDS Proxy or Supavisor it doesn't: a statement prepared in one
transaction is gone (or, worse, another client's statement of the same name
is there) in the next. Nothing is assumed from the settings: most such sites
run Django's defaults. ``True`` and ``False`` force it. Elsewhere (SQLite,
MySQL, psycopg 2) this is Django's plain cursor.

The proof costs one query per connection, and only on its second lease
statement: a connection that runs one (a web request under Django's default
``CONN_MAX_AGE = 0``) would gain nothing from preparing it, and pays nothing.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import struct
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from django_bgtasks.conf import conf
from django_bgtasks.db.rows import Row, named

# The name it had when this module was cursors.py: sites filter their logs by it.
logger = logging.getLogger("django_bgtasks.cursors")

# The cursor is kept on the Django connection object (one per thread and
# alias), under this name, with the driver connection it was made for: a
# reconnect gets a new one.
_ATTRIBUTE = "_bgtasks_prepared_cursor"
# And what is known of that driver connection's session: [connection,
# whether it is direct (None: not known yet)].
_SESSION = "_bgtasks_session"
_NEVER_BY_COUNT = 2**62
# The proof's one statement (here, not in db/engines.py, which runs its statements
# through this module): what the backend sees of its client and of itself.
# Through a proxy, its client is the proxy's connection, not ours.
SESSION_ENDPOINTS = (
    "SELECT host(inet_client_addr()), inet_client_port(),"
    " host(inet_server_addr()), inet_server_port(), pg_backend_pid()"
)
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def prepares(connection: BaseDatabaseWrapper) -> bool:
    """Whether the next lease statement on ``connection`` runs prepared."""
    if connection.vendor != "postgresql" or _preparing_cursor_class() is None:
        return False
    setting = conf.PREPARED_STATEMENTS
    if setting is not None:
        return bool(setting)
    if behind_transaction_pooling(connection):
        return False
    return _session_proved(connection)


def _session_proved(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection``'s session has proved direct. The first lease
    statement on a new driver connection runs unprepared and proves nothing;
    the second proves it, once. Inside the caller's transaction nothing is
    proved: the statement runs unprepared (and a failed proof would abort the
    caller's transaction)."""
    connection.ensure_connection()
    raw = connection.connection
    known = getattr(connection, _SESSION, None)
    if known is None or known[0] is not raw:
        setattr(connection, _SESSION, [raw, None])
        return False
    if known[1] is None and not connection.in_atomic_block:
        with connection.wrap_database_errors:
            known[1] = direct_session(raw)
        if not known[1]:
            _say_once(
                "bgtasks: the lease statements run unprepared on the %r database: its "
                "connection goes through a proxy or pooler (PgBouncer, RDS Proxy, "
                "Supavisor), where a prepared statement may not outlive its transaction. "
                "BGTASKS_PREPARED_STATEMENTS = True prepares them all the same, for a "
                "pooler that keeps sessions (docs/settings.md).",
                connection.alias,
            )
    return bool(known[1])


def direct_session(raw: Any) -> bool:
    """Whether the psycopg connection ``raw`` talks straight to the backend
    that serves it, with nothing in between that could run its next
    transaction on another backend: only then does a session (a prepared
    statement, a ``LISTEN``) last. Proved from the connection's own socket:

    * TCP: the backend's client is our socket, address and port, and the
      backend's own address and port are the ones we connected to. A
      proxy's connection to the backend is another socket.
    * A Unix socket (always on this machine): the process at the other end,
      as the kernel says (``SO_PEERCRED``), is the postmaster, the parent of
      the backend. A pooler's socket has the pooler at its end.

    Whatever can't be proved (another kind of socket, an unreadable
    ``/proc``, another pid namespace) is not direct."""
    with raw.cursor() as cursor:
        cursor.execute(SESSION_ENDPOINTS)
        client_host, client_port, server_host, server_port, backend = cursor.fetchone()
    with socket.socket(fileno=os.dup(raw.pgconn.socket)) as ours:
        if ours.family in (socket.AF_INET, socket.AF_INET6):
            return bool(
                ours.getsockname()[:2] == (client_host, client_port)
                and ours.getpeername()[:2] == (server_host, server_port)
            )
        if ours.family == socket.AF_UNIX:
            peer: int = _PEERCRED.unpack(
                ours.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
            )[0]
            return peer > 0 and _parent_of(backend) == peer
    return False


def _parent_of(pid: int) -> int | None:
    """The parent process of ``pid`` on this machine, or ``None``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return int(fields[fields.rindex(")") + 2 :].split()[1])


_said: set[str] = set()


def _say_once(message: str, alias: str) -> None:
    """Log ``message`` once per process and alias: every new connection
    would otherwise repeat it."""
    if alias not in _said:
        _said.add(alias)
        logger.warning(message, alias)


def behind_transaction_pooling(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection``'s settings say a transaction-pooling PgBouncer is
    in front (``DISABLE_SERVER_SIDE_CURSORS``, as Django's docs ask of such
    sites): each transaction may then run on another server connection, so
    nothing that lives in a session (a prepared statement, a ``LISTEN``) lasts.
    Most such sites don't say so: :func:`direct_session` finds them out."""
    return bool(connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS", False))


def fetch_all(connection: BaseDatabaseWrapper, query: str, params: dict[str, Any]) -> list[Row]:
    """Execute one of the app's statements on ``connection`` and return its
    rows, by column name (:func:`~django_bgtasks.db.rows.named`): prepared
    where :func:`prepares`, else on Django's plain cursor."""
    if prepares(connection):
        # Not closed: the connection's prepared-statement cursor, kept for
        # the next statement.
        cursor = prepared_cursor(connection)
        cursor.execute(query, params)
        return named(cursor)
    with connection.cursor() as plain:
        plain.execute(query, params)
        return named(plain)


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
