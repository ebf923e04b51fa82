"""Every SQL statement of the lease operations, one set per database vendor.

Each lease operation is exactly one of these statements: one round trip, one
commit. Values are always parameters (``%(name)s``); only the two table names
are filled in, from ``Model._meta.db_table`` quoted by the connection.

Rules every statement keeps:

* **Time is the database's.** Staleness, heartbeats and timestamps come from
  ``clock_timestamp()`` on PostgreSQL (``now()`` is frozen at transaction start)
  and from ``'now'`` on SQLite, never from the app server's clock.
* **Fencing.** A holder's write matches ``name``, ``owner`` and, when given,
  ``token``. A claim bumps ``token`` by one and never lowers it.
* **History in the same statement.** Ending a run writes its ``TaskRun`` row in
  the statement that ends it: a data-modifying CTE on PostgreSQL, and on SQLite
  (which has no such CTEs) the trigger that migration 0002 installs. A claim that
  takes over a stale lease records the old run as ``lost`` the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper

SUPPORTED_VENDORS = ("postgresql", "sqlite")
MIN_SQLITE_VERSION = (3, 35, 0)  # RETURNING

# Column order of every state read; leases.TaskState.from_row() relies on it.
STATE_COLUMNS = (
    "name, value, running, owner, token, ttl, started_at, finished_at, updated_at, "
    "cancel_requested, outcome, error, stale, heartbeat_age"
)
RUN_COLUMNS = "name, token, owner, started_at, finished_at, outcome, error, value"
LOST_ERROR = "lease expired; taken over by "


@dataclass(frozen=True)
class Statements:
    claim: str
    renew: str
    renew_with_value: str
    release: str
    force_release: str
    request_cancel: str
    expire_stale: str
    fence: str
    get_state: str
    list_states: str

    def format(self, **tables: str) -> Statements:
        return Statements(**{f.name: getattr(self, f.name).format(**tables) for f in fields(self)})


# --- PostgreSQL -------------------------------------------------------------

_PG_STALE = "{alias}updated_at < clock_timestamp() - {alias}ttl * interval '1 second'"
_PG_LIVE = "{alias}updated_at >= clock_timestamp() - {alias}ttl * interval '1 second'"
_PG_HOLDER = (
    "name = %(name)s AND owner = %(owner)s AND running"
    " AND (%(token)s::bigint IS NULL OR token = %(token)s::bigint)"
)
_PG_RECORD_ENDED = (
    "recorded AS (INSERT INTO {run} (" + RUN_COLUMNS + ") SELECT " + RUN_COLUMNS + " FROM ended"
    " ON CONFLICT (name, token) DO NOTHING)"
)
_PG_STATE = (
    "SELECT name, value, running AND NOT stale, owner, token, ttl, started_at, finished_at,"
    " updated_at, cancel_requested, outcome, error, stale, heartbeat_age FROM ("
    " SELECT t.*, t.running AND t.updated_at < now.ts - t.ttl * interval '1 second' AS stale,"
    " EXTRACT(EPOCH FROM now.ts - t.updated_at)::float8 AS heartbeat_age"
    " FROM {task} t CROSS JOIN (SELECT clock_timestamp() AS ts) now"
)

POSTGRESQL = Statements(
    # The old row is locked first (FOR UPDATE waits for a holder's fenced
    # transaction and then sees the latest version), so that a takeover can
    # record exactly the run it ends. A name never claimed before starts above
    # any token its history has seen, so tokens are never reused even if a
    # lease row is deleted by hand.
    claim=(
        "WITH prev AS ("
        " SELECT name, owner, token, running, value, started_at, updated_at,"
        " " + _PG_STALE.format(alias="") + " AS stale"
        " FROM {task} WHERE name = %(name)s FOR UPDATE"
        "), taken AS ("
        " UPDATE {task} AS t SET value = %(value)s::jsonb, running = true, owner = %(owner)s,"
        " token = t.token + 1, ttl = %(ttl)s, started_at = clock_timestamp(), finished_at = NULL,"
        " updated_at = clock_timestamp(), cancel_requested = false, outcome = '', error = ''"
        " FROM prev WHERE t.name = prev.name AND (NOT prev.running OR prev.stale)"
        " RETURNING t.token, prev.running AS was_running, prev.owner AS prev_owner,"
        " prev.token AS prev_token, prev.started_at AS prev_started_at,"
        " prev.updated_at AS prev_updated_at, prev.value AS prev_value"
        "), lost AS ("
        " INSERT INTO {run} (" + RUN_COLUMNS + ")"
        " SELECT %(name)s, prev_token, prev_owner, prev_started_at, prev_updated_at, 'lost',"
        " '" + LOST_ERROR + "' || %(owner)s::text, prev_value FROM taken WHERE was_running"
        " ON CONFLICT (name, token) DO NOTHING"
        "), created AS ("
        " INSERT INTO {task} (name, value, running, owner, token, ttl, started_at, finished_at,"
        " updated_at, cancel_requested, outcome, error)"
        " SELECT %(name)s, %(value)s::jsonb, true, %(owner)s,"
        " COALESCE((SELECT max(token) FROM {run} WHERE name = %(name)s), 0) + 1, %(ttl)s,"
        " clock_timestamp(), NULL, clock_timestamp(), false, '', ''"
        " WHERE NOT EXISTS (SELECT FROM prev)"
        " ON CONFLICT (name) DO NOTHING RETURNING token"
        ") SELECT token FROM taken UNION ALL SELECT token FROM created"
    ),
    # A heartbeat rewrites updated_at only: no indexed column, so a HOT update.
    renew=(
        "UPDATE {task} SET updated_at = clock_timestamp() WHERE "
        + _PG_HOLDER
        + " RETURNING cancel_requested"
    ),
    renew_with_value=(
        "UPDATE {task} SET updated_at = clock_timestamp(), value = %(value)s::jsonb"
        " WHERE " + _PG_HOLDER + " RETURNING cancel_requested"
    ),
    release=(
        "WITH ended AS ("
        " UPDATE {task} SET running = false, finished_at = clock_timestamp(),"
        " value = COALESCE(%(value)s::jsonb, value), outcome = %(outcome)s, error = %(error)s"
        " WHERE "
        + _PG_HOLDER
        + " RETURNING "
        + RUN_COLUMNS
        + "), "
        + _PG_RECORD_ENDED
        + " SELECT 1 FROM ended"
    ),
    force_release=(
        "WITH ended AS ("
        " UPDATE {task} SET running = false, finished_at = clock_timestamp(),"
        " outcome = 'released-by-operator', error = 'released by an operator'"
        " WHERE name = %(name)s AND running RETURNING "
        + RUN_COLUMNS
        + "), "
        + _PG_RECORD_ENDED
        + " SELECT 1 FROM ended"
    ),
    request_cancel=(
        "UPDATE {task} SET cancel_requested = true"
        " WHERE name = %(name)s AND running AND " + _PG_LIVE.format(alias="") + " RETURNING 1"
    ),
    # Ends every lease whose holder went silent, as lost, as of its last heartbeat.
    expire_stale=(
        "WITH ended AS ("
        " UPDATE {task} SET running = false, finished_at = updated_at, outcome = 'lost',"
        " error = 'lease expired: no heartbeat within the ttl'"
        " WHERE running AND "
        + _PG_STALE.format(alias="")
        + " RETURNING "
        + RUN_COLUMNS
        + "), "
        + _PG_RECORD_ENDED
        + " SELECT 1 FROM ended"
    ),
    # Locks the row for the caller's transaction: a takeover (whose claim locks
    # the same row) waits until that transaction ends.
    fence=(
        "SELECT 1 FROM {task} WHERE name = %(name)s AND owner = %(owner)s"
        " AND token = %(token)s::bigint AND running AND "
        + _PG_LIVE.format(alias="")
        + " FOR UPDATE"
    ),
    get_state=_PG_STATE + " WHERE t.name = %(name)s) s",
    list_states=_PG_STATE + ") s ORDER BY name",
)


# --- SQLite -----------------------------------------------------------------
# SQLite runs one writer at a time, so each statement below is atomic against
# every other process. Its 'now' is the database host's clock, which for an
# embedded database is the only clock there is. Timestamps are stored in the
# text format Django uses for DateTimeField (UTC, as USE_TZ = True stores them).

_SQ_NOW = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"
_SQ_AGE = "(julianday('now') - julianday({alias}updated_at)) * 86400.0"
_SQ_STALE = _SQ_AGE + " > {alias}ttl"
_SQ_HOLDER = (
    "name = %(name)s AND owner = %(owner)s AND running"
    " AND (%(token)s IS NULL OR token = %(token)s)"
)
_SQ_STATE = (
    "SELECT name, value, running AND NOT stale, owner, token, ttl, started_at, finished_at,"
    " updated_at, cancel_requested, outcome, error, stale, heartbeat_age FROM ("
    " SELECT *, running AND " + _SQ_STALE.format(alias="") + " AS stale,"
    " " + _SQ_AGE.format(alias="") + " AS heartbeat_age FROM {task}"
)

SQLITE = Statements(
    # The history trigger records the old run as lost when the token changes.
    claim=(
        "INSERT INTO {task} AS t (name, value, running, owner, token, ttl, started_at,"
        " finished_at, updated_at, cancel_requested, outcome, error)"
        " VALUES (%(name)s, %(value)s, 1, %(owner)s,"
        " COALESCE((SELECT max(token) FROM {run} WHERE name = %(name)s), 0) + 1, %(ttl)s,"
        " " + _SQ_NOW + ", NULL, " + _SQ_NOW + ", 0, '', '')"
        " ON CONFLICT (name) DO UPDATE SET value = excluded.value, running = 1,"
        " owner = excluded.owner, token = t.token + 1, ttl = excluded.ttl,"
        " started_at = excluded.started_at, finished_at = NULL, updated_at = excluded.updated_at,"
        " cancel_requested = 0, outcome = '', error = ''"
        " WHERE NOT t.running OR " + _SQ_STALE.format(alias="t.") + " RETURNING token"
    ),
    renew=(
        "UPDATE {task} SET updated_at = "
        + _SQ_NOW
        + " WHERE "
        + _SQ_HOLDER
        + " RETURNING cancel_requested"
    ),
    renew_with_value=(
        "UPDATE {task} SET updated_at = " + _SQ_NOW + ", value = %(value)s"
        " WHERE " + _SQ_HOLDER + " RETURNING cancel_requested"
    ),
    release=(
        "UPDATE {task} SET running = 0, finished_at = " + _SQ_NOW + ","
        " value = COALESCE(%(value)s, value), outcome = %(outcome)s, error = %(error)s"
        " WHERE " + _SQ_HOLDER + " RETURNING 1"
    ),
    force_release=(
        "UPDATE {task} SET running = 0, finished_at = " + _SQ_NOW + ","
        " outcome = 'released-by-operator', error = 'released by an operator'"
        " WHERE name = %(name)s AND running RETURNING 1"
    ),
    request_cancel=(
        "UPDATE {task} SET cancel_requested = 1"
        " WHERE name = %(name)s AND running AND NOT ("
        + _SQ_STALE.format(alias="")
        + ") RETURNING 1"
    ),
    expire_stale=(
        "UPDATE {task} SET running = 0, finished_at = updated_at, outcome = 'lost',"
        " error = 'lease expired: no heartbeat within the ttl'"
        " WHERE running AND " + _SQ_STALE.format(alias="") + " RETURNING 1"
    ),
    # SQLite has no row locks: a no-op write takes the database's write lock,
    # which every takeover needs too, until the caller's transaction ends.
    fence=(
        "UPDATE {task} SET updated_at = updated_at WHERE name = %(name)s AND owner = %(owner)s"
        " AND token = %(token)s AND running AND NOT ("
        + _SQ_STALE.format(alias="")
        + ") RETURNING 1"
    ),
    get_state=_SQ_STATE + " WHERE name = %(name)s)",
    list_states=_SQ_STATE + ") ORDER BY name",
)

_BY_VENDOR = {"postgresql": POSTGRESQL, "sqlite": SQLITE}


def statements(connection: BaseDatabaseWrapper) -> Statements:
    """The statements for this connection's vendor, with the table names filled in."""
    try:
        return _FORMATTED[connection.vendor]
    except KeyError:
        pass
    from .models import BackgroundTask, TaskRun

    try:
        template = _BY_VENDOR[connection.vendor]
    except KeyError:
        raise NotSupportedError(
            f"django-bgtasks supports {' and '.join(SUPPORTED_VENDORS)}, "
            f"not {connection.vendor!r} (database {connection.alias!r})"
        ) from None
    quote = connection.ops.quote_name
    formatted = template.format(
        task=quote(BackgroundTask._meta.db_table), run=quote(TaskRun._meta.db_table)
    )
    # Keyed by vendor alone: quoting is fixed per vendor, and a per-connection
    # key would grow with every thread.
    _FORMATTED[connection.vendor] = formatted
    return formatted


_FORMATTED: dict[str, Statements] = {}
