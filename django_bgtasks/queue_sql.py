"""The SQL of the Django Tasks queue (``QueuedTask.objects``), one set per vendor.

A queued task's row is its own lease while a worker runs it, so that nothing
is left behind in the lease table when it ends. Each operation below is one
statement, one round trip, and keeps the rules of :mod:`django_bgtasks.sql`:

* **Time is the database's** (``clock_timestamp()`` on PostgreSQL, ``'now'``
  on SQLite): heartbeats, staleness, ``run_after`` and every timestamp.
* **Fencing.** Every holder's write (heartbeat, finish) matches the row, its
  owner *and* its token, and needs a live lease (status ``RUNNING``, heartbeat
  within the ttl). A worker that was paused past its ttl, or whose task was
  recovered meanwhile, writes nothing.
* **Tokens only rise**: a claim sets ``token = token + 1``, so a task that is
  recovered and claimed again has a higher token than its lost run.
* **Skip what others hold.** On PostgreSQL the claim picks its row with
  ``FOR UPDATE SKIP LOCKED``: concurrent workers take different rows without
  waiting on each other. SQLite serialises writers, so the same
  ``UPDATE ... WHERE seq = (SELECT ... LIMIT 1)`` is already exclusive there.

The texts filled in are the table name, from ``QueuedTask._meta.db_table``,
quoted by the connection, and the statuses, from ``choices.QueueStatus``
(``{ready}``: plain words). Values are parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from django.db import NotSupportedError
from django.db.backends.base.base import BaseDatabaseWrapper

from .choices import QueueStatus

# What a claim returns; queue.Claim.from_row() relies on the order.
CLAIM_COLUMNS = """seq, uuid, task_path, backend, queue_name, priority, takes_context,
    args_kwargs, run_after, enqueued_at, started_at, last_attempted_at, attempts,
    max_attempts, worker_ids, token, ttl"""

# The statuses, as the templates name them: {ready}, {running}, ...
_STATUSES = {status.name.lower(): status.value for status in QueueStatus}

# The error recorded for a run whose worker went silent past its ttl.
LOST_ERROR_CLASS = "django_bgtasks.exceptions.LeaseLost"
CANCELLED_ERROR_CLASS = "django_bgtasks.exceptions.TaskCancelled"


@dataclass(frozen=True)
class QueueStatements:
    """One vendor's statements of the queue."""

    claim: str
    renew: str
    finish: str
    recover: str
    cancel: str
    ended: str
    give_back: str


POSTGRESQL = QueueStatements(
    claim=f"""
        UPDATE {{table}} SET status = '{{running}}', owner = %(owner)s::text, token = token + 1,
            updated_at = clock_timestamp(), cancel_requested = false,
            started_at = COALESCE(started_at, clock_timestamp()),
            last_attempted_at = clock_timestamp(), attempts = attempts + 1,
            worker_ids = worker_ids || jsonb_build_array(%(owner)s::text)
        WHERE seq = (
            SELECT seq FROM {{table}}
            WHERE status = '{{ready}}'
                AND (%(all)s::boolean OR queue_name = ANY(%(queues)s::text[]))
                AND (run_after IS NULL OR run_after <= clock_timestamp())
            ORDER BY priority DESC, seq
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        )
        RETURNING {CLAIM_COLUMNS}
    """,
    renew="""
        UPDATE {table} SET updated_at = clock_timestamp(),
            progress = CASE WHEN %(set_progress)s::boolean THEN %(progress)s::jsonb
                ELSE progress END
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = '{running}'
            AND updated_at >= clock_timestamp() - ttl * interval '1 second'
        RETURNING cancel_requested
    """,
    finish="""
        UPDATE {table} SET status = %(status)s::text, updated_at = clock_timestamp(),
            finished_at = CASE WHEN %(status)s::text = '{ready}' THEN NULL
                ELSE clock_timestamp() END,
            return_value = %(return_value)s::jsonb,
            errors = CASE WHEN %(error)s::jsonb IS NULL THEN errors
                ELSE errors || jsonb_build_array(%(error)s::jsonb) END,
            attempts = attempts - %(refund)s,
            active_key = CASE WHEN %(status)s::text = '{ready}' THEN active_key END
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = '{running}'
            AND updated_at >= clock_timestamp() - ttl * interval '1 second'
        RETURNING status, finished_at
    """,
    recover=f"""
        UPDATE {{table}} SET
            status = CASE WHEN attempts < max_attempts THEN '{{ready}}' ELSE '{{failed}}' END,
            active_key = CASE WHEN attempts < max_attempts THEN active_key END,
            finished_at = CASE WHEN attempts < max_attempts THEN NULL
                ELSE clock_timestamp() END,
            errors = errors || jsonb_build_array(jsonb_build_object(
                'exception_class_path', '{LOST_ERROR_CLASS}',
                'traceback', 'LeaseLost: the worker ' || owner || ' was lost: no heartbeat '
                    || 'within the ttl (' || ttl || ' s), on attempt ' || attempts
                    || ' of ' || max_attempts))
        WHERE status = '{{running}}'
            AND updated_at < clock_timestamp() - ttl * interval '1 second'
        RETURNING uuid, status
    """,
    cancel=f"""
        UPDATE {{table}} SET cancel_requested = true,
            status = CASE WHEN status = '{{ready}}' THEN '{{failed}}' ELSE status END,
            active_key = CASE WHEN status = '{{ready}}' THEN NULL ELSE active_key END,
            finished_at = CASE WHEN status = '{{ready}}' THEN clock_timestamp()
                ELSE finished_at END,
            errors = CASE WHEN status = '{{ready}}' THEN errors || jsonb_build_array(
                jsonb_build_object('exception_class_path', '{CANCELLED_ERROR_CLASS}',
                    'traceback', 'TaskCancelled: cancelled by an operator before it started'))
                ELSE errors END
        WHERE uuid = %(uuid)s AND status IN ('{{ready}}', '{{running}}')
        RETURNING status
    """,
    ended="""
        SELECT status, finished_at FROM {table}
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = %(status)s::text
    """,
    give_back="""
        UPDATE {table} SET status = '{ready}', updated_at = clock_timestamp(),
            started_at = CASE WHEN attempts = 1 THEN NULL ELSE started_at END,
            attempts = attempts - 1, worker_ids = worker_ids - (-1)
        WHERE owner = %(owner)s AND status = '{running}' AND NOT (seq = ANY(%(held)s::bigint[]))
        RETURNING uuid
    """,
)

_NOW = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"
_LIVE = "(julianday('now') - julianday(updated_at)) * 86400.0 <= ttl"

SQLITE = QueueStatements(
    claim=f"""
        UPDATE {{table}} SET status = '{{running}}', owner = %(owner)s, token = token + 1,
            updated_at = {_NOW}, cancel_requested = 0,
            started_at = COALESCE(started_at, {_NOW}), last_attempted_at = {_NOW},
            attempts = attempts + 1, worker_ids = json_insert(worker_ids, '$[#]', %(owner)s)
        WHERE seq = (
            SELECT seq FROM {{table}}
            WHERE status = '{{ready}}'
                AND (%(all)s OR queue_name IN (SELECT value FROM json_each(%(queues)s)))
                AND (run_after IS NULL OR julianday(run_after) <= julianday('now'))
            ORDER BY priority DESC, seq
            LIMIT 1
        )
        RETURNING {CLAIM_COLUMNS}
    """,
    renew=f"""
        UPDATE {{table}} SET updated_at = {_NOW},
            progress = CASE WHEN %(set_progress)s THEN %(progress)s ELSE progress END
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = '{{running}}' AND {_LIVE}
        RETURNING cancel_requested
    """,
    finish=f"""
        UPDATE {{table}} SET status = %(status)s, updated_at = {_NOW},
            finished_at = CASE WHEN %(status)s = '{{ready}}' THEN NULL ELSE {_NOW} END,
            return_value = %(return_value)s,
            errors = CASE WHEN %(error)s IS NULL THEN errors
                ELSE json_insert(errors, '$[#]', json(%(error)s)) END,
            attempts = attempts - %(refund)s,
            active_key = CASE WHEN %(status)s = '{{ready}}' THEN active_key END
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = '{{running}}' AND {_LIVE}
        RETURNING status, finished_at
    """,
    recover=f"""
        UPDATE {{table}} SET
            status = CASE WHEN attempts < max_attempts THEN '{{ready}}' ELSE '{{failed}}' END,
            active_key = CASE WHEN attempts < max_attempts THEN active_key END,
            finished_at = CASE WHEN attempts < max_attempts THEN NULL ELSE {_NOW} END,
            errors = json_insert(errors, '$[#]', json_object(
                'exception_class_path', '{LOST_ERROR_CLASS}',
                'traceback', 'LeaseLost: the worker ' || owner || ' was lost: no heartbeat '
                    || 'within the ttl (' || ttl || ' s), on attempt ' || attempts
                    || ' of ' || max_attempts))
        WHERE status = '{{running}}' AND NOT {_LIVE}
        RETURNING uuid, status
    """,
    cancel=f"""
        UPDATE {{table}} SET cancel_requested = 1,
            status = CASE WHEN status = '{{ready}}' THEN '{{failed}}' ELSE status END,
            active_key = CASE WHEN status = '{{ready}}' THEN NULL ELSE active_key END,
            finished_at = CASE WHEN status = '{{ready}}' THEN {_NOW} ELSE finished_at END,
            errors = CASE WHEN status = '{{ready}}' THEN json_insert(errors, '$[#]', json_object(
                'exception_class_path', '{CANCELLED_ERROR_CLASS}',
                'traceback', 'TaskCancelled: cancelled by an operator before it started'))
                ELSE errors END
        WHERE uuid = %(uuid)s AND status IN ('{{ready}}', '{{running}}')
        RETURNING status
    """,
    ended="""
        SELECT status, finished_at FROM {table}
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = %(status)s
    """,
    give_back=f"""
        UPDATE {{table}} SET status = '{{ready}}', updated_at = {_NOW},
            started_at = CASE WHEN attempts = 1 THEN NULL ELSE started_at END,
            attempts = attempts - 1, worker_ids = json_remove(worker_ids, '$[#-1]')
        WHERE owner = %(owner)s AND status = '{{running}}'
            AND seq NOT IN (SELECT value FROM json_each(%(held)s))
        RETURNING uuid
    """,
)

_BY_VENDOR = {"postgresql": POSTGRESQL, "sqlite": SQLITE}
# Not MySQL/MariaDB yet (bgtasks.E015): the lease table's vendors minus that.
SUPPORTED_VENDORS = tuple(_BY_VENDOR)
_RENDERED: dict[tuple[str, str], QueueStatements] = {}


def statements(connection: BaseDatabaseWrapper, *, table: str) -> QueueStatements:
    """The queue's statements for this connection's vendor, on ``table`` (the
    unquoted ``db_table``), ready to execute."""
    key = (connection.vendor, table)
    try:
        return _RENDERED[key]
    except KeyError:
        pass
    try:
        templates = _BY_VENDOR[connection.vendor]
    except KeyError:
        raise NotSupportedError(
            "django_bgtasks.backend.LeaseBackend supports PostgreSQL and SQLite, "
            f"not {connection.vendor!r} (database {connection.alias!r})"
        ) from None
    quoted = connection.ops.quote_name(table)
    rendered = QueueStatements(
        **{
            f.name: getattr(templates, f.name).format(table=quoted, **_STATUSES)
            for f in fields(QueueStatements)
        }
    )
    _RENDERED[key] = rendered
    return rendered
