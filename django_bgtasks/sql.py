"""Every SQL statement of the lease operations, one set per database vendor.

Each lease operation is exactly one of these statements: one round trip, one
commit. Values are always parameters (``%(name)s``). The only text filled in
is the two table names, which the caller passes from ``Model._meta.db_table``
and the connection quotes, and the named fragments below (``{holder}``, ``{stale}``, ...),
which are constants of this module.

Rules every statement keeps:

* **Time is the database's.** Staleness, heartbeats and timestamps come from
  ``clock_timestamp()`` on PostgreSQL (``now()`` is frozen at transaction
  start) and from ``'now'`` on SQLite, never from the app server's clock.
* **Fencing.** A holder's write matches ``name``, ``owner`` and, when given,
  ``token``, and needs a live lease: once the heartbeat is older than the ttl
  the lease reads as not running everywhere, and its old holder can no longer
  renew, update or release it, even if nobody has taken it over yet.
* **Tokens only rise.** A claim sets ``token = token + 1``. A name claimed for
  the first time starts above any token its history holds, so tokens are not
  reused even if a lease row is deleted by hand.
* **History in the same statement.** Ending a run writes its ``TaskRun`` row in
  the statement that ends it: a release, force release or expiry with a
  data-modifying CTE on PostgreSQL, and on SQLite (which has no such CTEs) with
  the trigger of migration 0002 (recreated with more columns by 0004 and
  0005). A claim that takes over a stale lease records
  the run it replaces as ``lost``, as of its last heartbeat, with a trigger on
  both vendors (0002 on SQLite, 0003 on PostgreSQL): only a trigger sees the
  exact row an upsert replaces.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields
from typing import Any

from django.db import IntegrityError, NotSupportedError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .cursors import fetch_all

SUPPORTED_VENDORS = ("postgresql", "sqlite", "mysql")
MIN_SQLITE_VERSION = (3, 35, 0)  # for RETURNING
MIN_MYSQL_VERSION = (8, 0, 0)  # the oldest of each server still maintained
MIN_MARIADB_VERSION = (10, 6, 0)

# Column order of every state read; leases.TaskState.from_row() relies on it.
STATE_COLUMNS = """name, value, running AND NOT stale, owner, token, ttl, started_at,
    finished_at, updated_at, cancel_requested, outcome, error, stale, heartbeat_age,
    requested_at, next_run_at, attempt, trigger, result, result_note"""
RUN_COLUMNS = """name, token, owner, started_at, finished_at, outcome, error, value,
    trigger, attempt, scheduled_for, skipped, result, result_note"""
# Column order of the workers' poll; states.DueRow.from_row() relies on it.
DUE_COLUMNS = """name, token, running AND NOT stale, stale, attempt, outcome,
    requested_at IS NOT NULL, schedule, next_run_at, slot_due, finished_age, db_now,
    result_note <> ''"""
# The workers' list (states.WorkerState.from_row()): ``age`` is the seconds since
# the row's last beat by the database's clock, and ``silent`` compares it with the
# ttl the worker stated, so no replica's clock decides that a worker is gone.
WORKER_COLUMNS = (
    "id, host, pid, tasks, concurrency, running, started_at, updated_at, age, ttl, "
    "age > ttl AS silent"
)


@dataclass(frozen=True)
class Statements:
    """One vendor's statements, one field per lease operation."""

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
    # The workers' (issue: workers): each is one statement, as above.
    request_run: str
    claim_request: str
    claim_scheduled: str
    claim_resume: str
    claim_retry: str
    skip_slot: str
    ensure_schedule: str
    due_work: str
    worker_beat: str
    worker_gone: str
    forget_workers: str
    list_workers: str
    clock: str


# --- The workers' statements that both vendors write alike --------------------------------
# (Each vendor's fragments fill in its clock and casts.)

# The request is taken in the claim that performs it: exactly one worker wins.
CLAIM_REQUEST = """
    UPDATE {task}
    SET {claim_set}, attempt = 1, run_args = request, value = NULL, scheduled_for = NULL,
        request = NULL, requested_at = NULL, requested_by = ''
    WHERE name = %(name)s AND requested_at IS NOT NULL AND (NOT running OR {stale})
    {claim_returning}
"""
# One run per slot: the claim moves the slot on, compare-and-set on the slot
# the worker saw, and only while the database's clock is still before the
# next slot (a worker that stalled after its poll can't run a slot late).
CLAIM_SCHEDULED = """
    UPDATE {task}
    SET {claim_set}, attempt = 1, run_args = NULL, value = NULL,
        scheduled_for = next_run_at, next_run_at = {next_slot}, schedule = %(schedule)s
    WHERE name = %(name)s AND {is_due_slot} AND {before_next} AND (NOT running OR {stale})
    {claim_returning}
"""
# A lost (stale, or recorded lost) or interrupted run of claim %(expect)s,
# again: with %(resume)s keeping its value for resume_from, else afresh (a
# retry). A graceful interruption does not use up an attempt; a loss does.
CLAIM_RESUME = """
    UPDATE {task}
    SET {claim_set},
        attempt = attempt + CASE WHEN NOT running AND outcome = %(interrupted)s
            THEN 0 ELSE 1 END,
        value = CASE WHEN {resume_param} THEN value END
    WHERE name = %(name)s AND token = {expect_param}
        AND ((running AND {stale} AND attempt < %(max_attempts)s)
            OR (NOT running AND outcome = %(interrupted)s)
            OR (NOT running AND outcome = %(lost)s AND attempt < %(max_attempts)s))
    {claim_returning}
"""
# A failed run of claim %(expect)s, again, once its delay has passed.
CLAIM_RETRY = """
    UPDATE {task}
    SET {claim_set}, attempt = attempt + 1,
        value = CASE WHEN {resume_param} THEN value END
    WHERE name = %(name)s AND token = {expect_param} AND NOT running
        AND outcome = %(failed)s AND attempt < %(max_attempts)s AND {delay_passed}
        AND result_note = ''
    {claim_returning}
"""
# The slot came while the task still runs: move on, and count it on the run.
SKIP_SLOT = """
    UPDATE {task} SET next_run_at = {next_slot}, skipped = skipped + 1, schedule = %(schedule)s
    WHERE name = %(name)s AND running AND NOT ({stale}) AND {is_due_slot} AND {before_next}
    RETURNING 1
"""


# --- PostgreSQL ---------------------------------------------------------------

POSTGRESQL_FRAGMENTS = {
    "live": "updated_at >= clock_timestamp() - ttl * interval '1 second'",
    "stale": "updated_at < clock_timestamp() - ttl * interval '1 second'",
    "t_stale": "t.updated_at < clock_timestamp() - t.ttl * interval '1 second'",
    "holder": """name = %(name)s AND owner = %(owner)s AND running
        AND (%(token)s::bigint IS NULL OR token = %(token)s::bigint)
        AND updated_at >= clock_timestamp() - ttl * interval '1 second'""",
    "record_ended": f"""recorded AS (
        INSERT INTO {{run}} ({RUN_COLUMNS}) SELECT {RUN_COLUMNS} FROM ended
        ON CONFLICT (name, token) DO NOTHING
    )""",
    "run_columns": RUN_COLUMNS,
    "state_columns": STATE_COLUMNS,
    "due_columns": DUE_COLUMNS,
    "worker_columns": WORKER_COLUMNS,
    # What every claim by UPDATE sets (a worker's claim of an existing row).
    "claim_set": """running = true, owner = %(owner)s, token = token + 1, ttl = %(ttl)s,
        started_at = clock_timestamp(), finished_at = NULL, updated_at = clock_timestamp(),
        cancel_requested = false, outcome = '', error = '', skipped = 0,
        trigger = %(trigger)s, result = NULL, result_note = ''""",
    # A row that a request or a schedule creates before any claim: not running,
    # its token at the highest its history holds, so the first claim rises above it.
    "new_row_columns": """name, value, running, owner, token, ttl, cancel_requested,
        outcome, error, trigger, attempt, skipped, requested_at, requested_by, request,
        schedule, next_run_at""",
    "new_row_token": "COALESCE((SELECT max(token) FROM {run} WHERE name = %(name)s::text), 0)",
    "claim_returning": "RETURNING token, attempt, run_args, value",
    "before_next": "clock_timestamp() < %(next)s::timestamptz",
    "is_due_slot": "next_run_at = %(due)s::timestamptz",
    "next_slot": "%(next)s::timestamptz",
    "resume_param": "%(resume)s::boolean",
    "expect_param": "%(expect)s::bigint",
    "delay_passed": "finished_at <= clock_timestamp() - %(delay)s * interval '1 second'",
    "state_source": """(
        SELECT t.*,
            t.running AND t.updated_at < now.ts - t.ttl * interval '1 second' AS stale,
            EXTRACT(EPOCH FROM now.ts - t.updated_at)::float8 AS heartbeat_age
        FROM {task} t CROSS JOIN (SELECT clock_timestamp() AS ts) now
    ) s""",
}

POSTGRESQL = Statements(
    # A plain upsert, as on SQLite. (The casts give the repeated parameter one
    # type under server-side binding.) On a conflict it waits for the row's lock
    # (a holder's fenced transaction), then re-checks the WHERE on the latest
    # version. Taking over a running row changes its token, which fires the
    # trigger of migration 0003: it records the replaced run as lost.
    claim="""
        INSERT INTO {task} AS t (name, value, running, owner, token, ttl, started_at,
            finished_at, updated_at, cancel_requested, outcome, error, trigger, attempt,
            run_args, scheduled_for, skipped, result, result_note)
        VALUES (%(name)s::text, %(value)s::jsonb, true, %(owner)s,
            COALESCE((SELECT max(token) FROM {run} WHERE name = %(name)s::text), 0) + 1,
            %(ttl)s, clock_timestamp(), NULL, clock_timestamp(), false, '', '', %(trigger)s,
            1, %(args)s::jsonb, NULL, 0, NULL, '')
        ON CONFLICT (name) DO UPDATE
        SET value = excluded.value, running = true, owner = excluded.owner,
            token = t.token + 1, ttl = excluded.ttl, started_at = clock_timestamp(),
            finished_at = NULL, updated_at = clock_timestamp(),
            cancel_requested = false, outcome = '', error = '', trigger = excluded.trigger,
            attempt = 1, run_args = excluded.run_args, scheduled_for = NULL, skipped = 0,
            result = NULL, result_note = ''
        WHERE NOT t.running OR {t_stale}
        RETURNING token
    """,
    # A heartbeat rewrites updated_at only, which no index covers: a HOT update.
    renew="""
        UPDATE {task} SET updated_at = clock_timestamp()
        WHERE {holder}
        RETURNING cancel_requested
    """,
    renew_with_value="""
        UPDATE {task} SET updated_at = clock_timestamp(), value = %(value)s::jsonb
        WHERE {holder}
        RETURNING cancel_requested
    """,
    release="""
        WITH ended AS (
            UPDATE {task}
            SET running = false, finished_at = clock_timestamp(),
                value = COALESCE(%(value)s::jsonb, value), outcome = %(outcome)s,
                error = %(error)s, result = %(result)s::jsonb, result_note = %(result_note)s
            WHERE {holder}
            RETURNING {run_columns}
        ), {record_ended}
        SELECT 1 FROM ended
    """,
    force_release="""
        WITH ended AS (
            UPDATE {task}
            SET running = false, finished_at = clock_timestamp(),
                outcome = %(outcome)s, error = %(error)s
            WHERE name = %(name)s AND running
                AND (%(token)s::bigint IS NULL OR token = %(token)s::bigint)
            RETURNING {run_columns}
        ), {record_ended}
        SELECT 1 FROM ended
    """,
    request_cancel="""
        UPDATE {task} SET cancel_requested = true
        WHERE name = %(name)s AND running AND {live}
            AND (%(token)s::bigint IS NULL OR token = %(token)s::bigint)
        RETURNING 1
    """,
    # Ends every lease whose holder went silent, as lost, as of its last heartbeat.
    expire_stale="""
        WITH ended AS (
            UPDATE {task}
            SET running = false, finished_at = updated_at, outcome = %(outcome)s,
                error = %(error)s
            WHERE running AND {stale}
                AND (%(name)s::text IS NULL OR name = %(name)s::text)
                AND (%(token)s::bigint IS NULL OR token = %(token)s::bigint)
            RETURNING {run_columns}
        ), {record_ended}
        SELECT 1 FROM ended
    """,
    # Locks the row for the caller's transaction: a takeover, whose claim
    # locks the same row, waits until that transaction ends. A no-op write,
    # not SELECT ... FOR UPDATE: an UPDATE that waited on a row lock re-checks
    # its WHERE only if the row was modified meanwhile. A heartbeat sent just
    # before the holder froze inside its fenced transaction would otherwise
    # renew the lease on a staleness check made before the freeze; with a new
    # row version it re-checks staleness by the clock after the wait.
    fence="UPDATE {task} SET updated_at = updated_at WHERE {holder} RETURNING 1",
    get_state="SELECT {state_columns} FROM {state_source} WHERE name = %(name)s",
    list_states="SELECT {state_columns} FROM {state_source} ORDER BY name",
    # A pending request: kept on the row (created if need be), at most one.
    request_run="""
        INSERT INTO {task} AS t ({new_row_columns})
        VALUES (%(name)s::text, NULL, false, '', {new_row_token}, %(ttl)s, false, '', '', '',
            0, 0, clock_timestamp(), %(requested_by)s, %(request)s::jsonb, '', NULL)
        ON CONFLICT (name) DO UPDATE
        SET requested_at = clock_timestamp(), requested_by = excluded.requested_by,
            request = excluded.request
        WHERE t.requested_at IS NULL
        RETURNING 1
    """,
    claim_request=CLAIM_REQUEST,
    claim_scheduled=CLAIM_SCHEDULED,
    claim_resume=CLAIM_RESUME,
    claim_retry=CLAIM_RETRY,
    skip_slot=SKIP_SLOT,
    # A scheduled task's row and first slot. A changed schedule moves the slot
    # only earlier (or removes it): workers that disagree for a while (a rolling
    # deploy) can never keep postponing a slot, so every due slot is claimed;
    # the claim writes its worker's schedule and next slot.
    ensure_schedule="""
        INSERT INTO {task} AS t ({new_row_columns})
        VALUES (%(name)s::text, NULL, false, '', {new_row_token}, %(ttl)s, false, '', '', '',
            0, 0, NULL, '', NULL, %(schedule)s::text, %(next)s::timestamptz)
        ON CONFLICT (name) DO UPDATE
        SET schedule = excluded.schedule, next_run_at = excluded.next_run_at
        WHERE (t.next_run_at IS NULL AND excluded.next_run_at IS NOT NULL)
            OR (t.schedule IS DISTINCT FROM excluded.schedule
                AND (excluded.next_run_at IS NULL OR excluded.next_run_at < t.next_run_at))
        RETURNING 1
    """,
    # The workers' poll: a read, so an idle loop writes nothing.
    due_work="""
        SELECT {due_columns} FROM (
            SELECT t.*,
                t.running AND t.updated_at < now.ts - t.ttl * interval '1 second' AS stale,
                t.next_run_at <= now.ts AS slot_due,
                EXTRACT(EPOCH FROM now.ts - t.finished_at)::float8 AS finished_age,
                now.ts AS db_now
            FROM {task} t CROSS JOIN (SELECT clock_timestamp() AS ts) now
        ) s
        ORDER BY name
    """,
    worker_beat="""
        INSERT INTO {worker} AS w (id, host, pid, tasks, concurrency, running, started_at,
            updated_at, ttl)
        VALUES (%(id)s, %(host)s, %(pid)s, %(tasks)s::jsonb, %(concurrency)s,
            %(running)s::jsonb, clock_timestamp(), clock_timestamp(), %(ttl)s)
        ON CONFLICT (id) DO UPDATE
        SET running = excluded.running, updated_at = excluded.updated_at
        RETURNING 1
    """,
    worker_gone="DELETE FROM {worker} WHERE id = %(id)s RETURNING 1",
    # Never a row whose own ttl is longer (a worker that is merely slow to beat).
    forget_workers="""
        DELETE FROM {worker}
        WHERE updated_at < clock_timestamp()
            - GREATEST(%(seconds)s, ttl) * interval '1 second'
        RETURNING 1
    """,
    list_workers="""
        SELECT {worker_columns} FROM (
            SELECT w.*, EXTRACT(EPOCH FROM clock_timestamp() - w.updated_at)::float8 AS age
            FROM {worker} w
        ) s
        ORDER BY host, pid
    """,
    clock="SELECT clock_timestamp()",
)


# What the replication check reads from the lease database's PostgreSQL
# (checks.py): whether this is a standby, the primary's synchronous standbys
# as configured and as connected, and this session's synchronous_commit. A
# user without pg_monitor (or pg_read_all_stats) sees pg_stat_replication's
# rows with sync_state NULL: counted apart, so the check can say so.
POSTGRESQL_REPLICATION = """
    SELECT pg_is_in_recovery(),
        current_setting('synchronous_standby_names'),
        current_setting('synchronous_commit'),
        (SELECT count(*) FROM pg_stat_replication WHERE sync_state = ANY(%(sync_states)s)),
        (SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL)
"""
# The sync_state of a standby whose flush a commit waits for.
SYNC_STATES = ["sync", "quorum"]


@dataclass(frozen=True)
class PostgreSQLReplication:
    """What the replication check needs to know of a PostgreSQL server."""

    in_recovery: bool
    synchronous_standby_names: str
    synchronous_commit: str
    sync_standbys: int  # connected, and waited for by commits
    hidden_standbys: int  # connected, but this user can't see their sync_state


def postgresql_replication(connection: BaseDatabaseWrapper) -> PostgreSQLReplication:
    """Read this PostgreSQL connection's server's replication settings."""
    with connection.cursor() as cursor:
        cursor.execute(POSTGRESQL_REPLICATION, {"sync_states": SYNC_STATES})
        in_recovery, names, commit, sync, hidden = cursor.fetchone()
    return PostgreSQLReplication(
        in_recovery=bool(in_recovery),
        synchronous_standby_names=str(names),
        synchronous_commit=str(commit),
        sync_standbys=int(sync),
        hidden_standbys=int(hidden),
    )


# --- SQLite -----------------------------------------------------------------------
# SQLite runs one writer at a time, so each statement is atomic against every
# other process. Its 'now' is the database host's clock, which for an embedded
# database is the only clock there is. Times are stored as the UTC text Django
# uses for DateTimeField. ('%%' is a literal '%' once the parameters are in.)

_SQLITE_AGE = "(julianday('now') - julianday(updated_at)) * 86400.0"
SQLITE_FRAGMENTS = {
    "now": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')",
    "stale": f"{_SQLITE_AGE} > ttl",
    "t_stale": "(julianday('now') - julianday(t.updated_at)) * 86400.0 > t.ttl",
    "holder": f"""name = %(name)s AND owner = %(owner)s AND running
        AND (%(token)s IS NULL OR token = %(token)s)
        AND NOT ({_SQLITE_AGE} > ttl)""",
    "state_columns": STATE_COLUMNS,
    "state_source": f"""(
        SELECT *, running AND {_SQLITE_AGE} > ttl AS stale, {_SQLITE_AGE} AS heartbeat_age
        FROM {{task}}
    )""",
    "due_columns": DUE_COLUMNS,
    "worker_columns": WORKER_COLUMNS,
    "claim_set": """running = 1, owner = %(owner)s, token = token + 1, ttl = %(ttl)s,
        started_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'), finished_at = NULL,
        updated_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'), cancel_requested = 0,
        outcome = '', error = '', skipped = 0, trigger = %(trigger)s, result = NULL,
        result_note = ''""",
    "new_row_columns": """name, value, running, owner, token, ttl, cancel_requested,
        outcome, error, trigger, attempt, skipped, requested_at, requested_by, request,
        schedule, next_run_at""",
    "new_row_token": "COALESCE((SELECT max(token) FROM {run} WHERE name = %(name)s), 0)",
    "claim_returning": "RETURNING token, attempt, run_args, value",
    # Slot times are passed as naive UTC text, as the statements store times.
    "before_next": "julianday('now') < julianday(%(next)s)",
    # The same instant, whichever text form it was written in.
    "is_due_slot": "julianday(next_run_at) = julianday(%(due)s)",
    "next_slot": "%(next)s",
    "resume_param": "%(resume)s",
    "expect_param": "%(expect)s",
    "delay_passed": "(julianday('now') - julianday(finished_at)) * 86400.0 >= %(delay)s",
}

SQLITE = Statements(
    # The history trigger records the old run as lost when the token changes.
    claim="""
        INSERT INTO {task} AS t (name, value, running, owner, token, ttl, started_at,
            finished_at, updated_at, cancel_requested, outcome, error, trigger, attempt,
            run_args, scheduled_for, skipped, result, result_note)
        VALUES (%(name)s, %(value)s, 1, %(owner)s,
            COALESCE((SELECT max(token) FROM {run} WHERE name = %(name)s), 0) + 1,
            %(ttl)s, {now}, NULL, {now}, 0, '', '', %(trigger)s, 1, %(args)s, NULL, 0, NULL, '')
        ON CONFLICT (name) DO UPDATE
        SET value = excluded.value, running = 1, owner = excluded.owner,
            token = t.token + 1, ttl = excluded.ttl, started_at = excluded.started_at,
            finished_at = NULL, updated_at = excluded.updated_at,
            cancel_requested = 0, outcome = '', error = '', trigger = excluded.trigger,
            attempt = 1, run_args = excluded.run_args, scheduled_for = NULL, skipped = 0,
            result = NULL, result_note = ''
        WHERE NOT t.running OR {t_stale}
        RETURNING token
    """,
    renew="UPDATE {task} SET updated_at = {now} WHERE {holder} RETURNING cancel_requested",
    renew_with_value="""
        UPDATE {task} SET updated_at = {now}, value = %(value)s
        WHERE {holder}
        RETURNING cancel_requested
    """,
    release="""
        UPDATE {task}
        SET running = 0, finished_at = {now}, value = COALESCE(%(value)s, value),
            outcome = %(outcome)s, error = %(error)s, result = %(result)s,
            result_note = %(result_note)s
        WHERE {holder}
        RETURNING 1
    """,
    force_release="""
        UPDATE {task}
        SET running = 0, finished_at = {now}, outcome = %(outcome)s, error = %(error)s
        WHERE name = %(name)s AND running AND (%(token)s IS NULL OR token = %(token)s)
        RETURNING 1
    """,
    request_cancel="""
        UPDATE {task} SET cancel_requested = 1
        WHERE name = %(name)s AND running AND NOT ({stale})
            AND (%(token)s IS NULL OR token = %(token)s)
        RETURNING 1
    """,
    expire_stale="""
        UPDATE {task}
        SET running = 0, finished_at = updated_at, outcome = %(outcome)s, error = %(error)s
        WHERE running AND {stale} AND (%(name)s IS NULL OR name = %(name)s)
            AND (%(token)s IS NULL OR token = %(token)s)
        RETURNING 1
    """,
    # SQLite has no row locks: a no-op write takes the database's write lock,
    # which every takeover needs too, until the caller's transaction ends.
    fence="UPDATE {task} SET updated_at = updated_at WHERE {holder} RETURNING 1",
    get_state="SELECT {state_columns} FROM {state_source} WHERE name = %(name)s",
    list_states="SELECT {state_columns} FROM {state_source} ORDER BY name",
    request_run="""
        INSERT INTO {task} AS t ({new_row_columns})
        VALUES (%(name)s, NULL, 0, '', {new_row_token}, %(ttl)s, 0, '', '', '',
            0, 0, {now}, %(requested_by)s, %(request)s, '', NULL)
        ON CONFLICT (name) DO UPDATE
        SET requested_at = excluded.requested_at, requested_by = excluded.requested_by,
            request = excluded.request
        WHERE t.requested_at IS NULL
        RETURNING 1
    """,
    claim_request=CLAIM_REQUEST,
    claim_scheduled=CLAIM_SCHEDULED,
    claim_resume=CLAIM_RESUME,
    claim_retry=CLAIM_RETRY,
    skip_slot=SKIP_SLOT,
    ensure_schedule="""
        INSERT INTO {task} AS t ({new_row_columns})
        VALUES (%(name)s, NULL, 0, '', {new_row_token}, %(ttl)s, 0, '', '', '',
            0, 0, NULL, '', NULL, %(schedule)s, %(next)s)
        ON CONFLICT (name) DO UPDATE
        SET schedule = excluded.schedule, next_run_at = excluded.next_run_at
        WHERE (t.next_run_at IS NULL AND excluded.next_run_at IS NOT NULL)
            OR (t.schedule IS NOT excluded.schedule
                AND (excluded.next_run_at IS NULL
                    OR julianday(excluded.next_run_at) < julianday(t.next_run_at)))
        RETURNING 1
    """,
    due_work=f"""
        SELECT {{due_columns}} FROM (
            SELECT *, running AND {_SQLITE_AGE} > ttl AS stale,
                julianday(next_run_at) <= julianday('now') AS slot_due,
                (julianday('now') - julianday(finished_at)) * 86400.0 AS finished_age,
                {{now}} AS db_now
            FROM {{task}}
        )
        ORDER BY name
    """,
    worker_beat="""
        INSERT INTO {worker} AS w (id, host, pid, tasks, concurrency, running, started_at,
            updated_at, ttl)
        VALUES (%(id)s, %(host)s, %(pid)s, %(tasks)s, %(concurrency)s, %(running)s, {now},
            {now}, %(ttl)s)
        ON CONFLICT (id) DO UPDATE
        SET running = excluded.running, updated_at = excluded.updated_at
        RETURNING 1
    """,
    worker_gone="DELETE FROM {worker} WHERE id = %(id)s RETURNING 1",
    forget_workers="""
        DELETE FROM {worker}
        WHERE (julianday('now') - julianday(updated_at)) * 86400.0 > max(%(seconds)s, ttl)
        RETURNING 1
    """,
    list_workers="""
        SELECT {worker_columns} FROM (
            SELECT *, (julianday('now') - julianday(updated_at)) * 86400.0 AS age
            FROM {worker}
        )
        ORDER BY host, pid
    """,
    clock="SELECT {now}",
)


# --- MySQL 8.0+ and MariaDB 10.6+ ------------------------------------------------------
# Neither has UPDATE ... RETURNING (MySQL has no RETURNING at all), and Django's
# MySQL backend counts *matched* rows (CLIENT.FOUND_ROWS), so a write reports
# by its row count (a heartbeat's cancel flag too: see renew), and a claim's
# token by the LAST_INSERT_ID(expr) idiom. The server sends
# that value in the statement's own OK packet (cursor.lastrowid), except that
# MariaDB sends 0 when the statement fired a trigger, as every UPDATE of the
# lease table does (migration 0006). So a claim's UPDATE is sent followed by
# ``SELECT LAST_INSERT_ID()`` in the same query (one round trip; mysqlclient
# allows several statements per query by default), or, where a site turned
# that off, the SELECT right after it on the same connection (nothing can
# come between). The values set are never 0, so 0 means "not sent" (an
# INSERT's reply). MYSQL_RESULTS says how each statement is read.
#
# The clock is SYSDATE(6): the time at execution, with microseconds.
# NOW()/UTC_TIMESTAMP() are fixed at statement start, before any lock wait, so
# a claim that waited for a fenced row would judge staleness by a clock from
# before the wait. SYSDATE() is in the session's time zone, which must be UTC
# (the times Django stores; check bgtasks.E011). It needs row-based or mixed
# binary logging for replication, and a server started with --sysdate-is-now
# makes it NOW() again (check bgtasks.W003).
#
# MySQL assigns SET columns left to right, each seeing the ones before it (as
# MariaDB does without SIMULTANEOUS_ASSIGNMENT): a SET that reads a column
# comes before the one that changes it. The WHERE sees the row as it was.
#
# Statements of several steps are joined by MYSQL_STEP; run() says when the
# later steps run. History is written by migration 0006's trigger.

MYSQL_STEP = "\n;\n"
_MYSQL_NOW = "SYSDATE(6)"
_MYSQL_TTL = "INTERVAL ROUND(ttl * 1000000) MICROSECOND"


def _mysql_names(columns: str) -> str:
    # `trigger` is a reserved word in MySQL.
    return columns.replace("trigger", "`trigger`")


MYSQL_FRAGMENTS = {
    "now": _MYSQL_NOW,
    "live": f"updated_at >= {_MYSQL_NOW} - {_MYSQL_TTL}",
    "stale": f"updated_at < {_MYSQL_NOW} - {_MYSQL_TTL}",
    "holder": f"""name = %(name)s AND owner = %(owner)s AND running
        AND (%(token)s IS NULL OR token = %(token)s)
        AND updated_at >= {_MYSQL_NOW} - {_MYSQL_TTL}""",
    "state_columns": _mysql_names(STATE_COLUMNS),
    "due_columns": DUE_COLUMNS,
    "worker_columns": WORKER_COLUMNS,
    # The token first: LAST_INSERT_ID(expr) hands it back in the OK packet.
    "claim_set": f"""token = LAST_INSERT_ID(token + 1), running = 1, owner = %(owner)s,
        ttl = %(ttl)s, started_at = {_MYSQL_NOW}, finished_at = NULL,
        updated_at = {_MYSQL_NOW}, cancel_requested = 0, outcome = '', error = '',
        skipped = 0, `trigger` = %(trigger)s, result = NULL, result_note = ''""",
    "new_row_columns": _mysql_names(
        """name, value, running, owner, token, ttl, cancel_requested,
        outcome, error, trigger, attempt, skipped, requested_at, requested_by, request,
        schedule, next_run_at"""
    ),
    "new_row_token": "COALESCE((SELECT MAX(token) FROM {run} WHERE name = %(name)s), 0)",
    # A worker's claim also needs the run's attempt, arguments and value: read
    # in the claim's transaction, right after it (run(), "claim").
    "claim_returning": f"""{MYSQL_STEP}SELECT token, attempt, run_args, value FROM {{task}}
        WHERE name = %(name)s AND token = LAST_INSERT_ID()""",
    "before_next": f"{_MYSQL_NOW} < %(next)s",
    "is_due_slot": "next_run_at = %(due)s",
    "next_slot": "%(next)s",
    "resume_param": "%(resume)s",
    "expect_param": "%(expect)s",
    "delay_passed": f"""finished_at <= {_MYSQL_NOW}
        - INTERVAL ROUND(%(delay)s * 1000000) MICROSECOND""",
    "state_source": f"""(
        SELECT t.*,
            t.running AND t.updated_at < n.ts - INTERVAL ROUND(t.ttl * 1000000) MICROSECOND
                AS stale,
            TIMESTAMPDIFF(MICROSECOND, t.updated_at, n.ts) / 1000000.0 AS heartbeat_age
        FROM {{task}} t CROSS JOIN (SELECT {_MYSQL_NOW} AS ts) n
    ) s""",
}

# How run() reads each MySQL statement's result (see there).
MYSQL_RESULTS = {
    "claim": "upsert",
    "renew": "renew",
    "renew_with_value": "renew",
    "release": "count",
    "force_release": "count",
    "request_cancel": "count",
    "expire_stale": "count",
    "fence": "count",
    "get_state": "rows",
    "list_states": "rows",
    "request_run": "upsert",
    "claim_request": "claim",
    "claim_scheduled": "claim",
    "claim_resume": "claim",
    "claim_retry": "claim",
    "skip_slot": "count",
    "ensure_schedule": "upsert",
    "due_work": "rows",
    "worker_beat": "upsert",
    "worker_gone": "count",
    "forget_workers": "count",
    "list_workers": "rows",
    "clock": "rows",
}

MYSQL = Statements(
    # An UPDATE of an existing row (every claim after a name's first is one
    # round trip), else an INSERT of the first row; if another claim or a
    # request inserted it in between, the UPDATE once more. Each step is a
    # compare-and-set of its own. An UPDATE that finds the row locked (a
    # holder's fenced transaction) waits, then re-reads the newest row and
    # re-checks its WHERE by SYSDATE() after the wait. A takeover changes the
    # token of a running row: 0006's trigger records the replaced run as lost.
    claim=f"""
        UPDATE {{task}}
        SET {{claim_set}}, value = %(value)s, attempt = 1, run_args = %(args)s,
            scheduled_for = NULL
        WHERE name = %(name)s AND (NOT running OR {{stale}})
        {MYSQL_STEP}
        INSERT INTO {{task}} (name, value, running, owner, token, ttl, started_at,
            finished_at, updated_at, cancel_requested, outcome, error, `trigger`, attempt,
            run_args, scheduled_for, skipped, result, result_note)
        VALUES (%(name)s, %(value)s, 1, %(owner)s,
            LAST_INSERT_ID(COALESCE((SELECT MAX(token) FROM {{run}} WHERE name = %(name)s), 0)
                + 1),
            %(ttl)s, {{now}}, NULL, {{now}}, 0, '', '', %(trigger)s, 1, %(args)s, NULL, 0,
            NULL, '')
    """,
    # A heartbeat tells the holder whether a cancel was requested. As the
    # first step also asks for no cancel request, its row count says both: a
    # match is a renewal without one, in one round trip (the usual case).
    # Only if it matched nothing does the second step renew a lease with a
    # request (a cancel can't be withdrawn: only a new claim clears it, which
    # ends the holder's lease).
    renew=f"""
        UPDATE {{task}} SET updated_at = {{now}} WHERE {{holder}} AND NOT cancel_requested
        {MYSQL_STEP}
        UPDATE {{task}} SET updated_at = {{now}} WHERE {{holder}}
    """,
    renew_with_value=f"""
        UPDATE {{task}} SET updated_at = {{now}}, value = %(value)s
        WHERE {{holder}} AND NOT cancel_requested
        {MYSQL_STEP}
        UPDATE {{task}} SET updated_at = {{now}}, value = %(value)s WHERE {{holder}}
    """,
    release="""
        UPDATE {task}
        SET running = 0, finished_at = {now}, value = COALESCE(%(value)s, value),
            outcome = %(outcome)s, error = %(error)s, result = %(result)s,
            result_note = %(result_note)s
        WHERE {holder}
    """,
    force_release="""
        UPDATE {task}
        SET running = 0, finished_at = {now}, outcome = %(outcome)s, error = %(error)s
        WHERE name = %(name)s AND running AND (%(token)s IS NULL OR token = %(token)s)
    """,
    request_cancel="""
        UPDATE {task} SET cancel_requested = 1
        WHERE name = %(name)s AND running AND {live}
            AND (%(token)s IS NULL OR token = %(token)s)
    """,
    expire_stale="""
        UPDATE {task}
        SET running = 0, finished_at = updated_at, outcome = %(outcome)s, error = %(error)s
        WHERE running AND {stale} AND (%(name)s IS NULL OR name = %(name)s)
            AND (%(token)s IS NULL OR token = %(token)s)
    """,
    # InnoDB's row lock for the caller's transaction, by a no-op write (a
    # locking read would do as much): a takeover's UPDATE waits for it, then
    # reads the newest row version, whatever the isolation level, and judges
    # staleness by SYSDATE() after the wait.
    fence="UPDATE {task} SET updated_at = updated_at WHERE {holder}",
    get_state="SELECT {state_columns} FROM {state_source} WHERE name = %(name)s",
    list_states="SELECT {state_columns} FROM {state_source} ORDER BY name",
    # A pending request, at most one: on the row if there is one, else on a new row.
    request_run=f"""
        UPDATE {{task}}
        SET request = %(request)s, requested_by = %(requested_by)s, requested_at = {{now}}
        WHERE name = %(name)s AND requested_at IS NULL
        {MYSQL_STEP}
        INSERT INTO {{task}} ({{new_row_columns}})
        VALUES (%(name)s, NULL, 0, '', {{new_row_token}}, %(ttl)s, 0, '', '', '',
            0, 0, {{now}}, %(requested_by)s, %(request)s, '', NULL)
    """,
    claim_request=CLAIM_REQUEST,
    claim_scheduled=CLAIM_SCHEDULED,
    # As CLAIM_RESUME, with the attempt and value set before {claim_set}
    # changes the columns they read (SET runs left to right here).
    claim_resume="""
        UPDATE {task}
        SET attempt = attempt + CASE WHEN NOT running AND outcome = %(interrupted)s
                THEN 0 ELSE 1 END,
            value = CASE WHEN {resume_param} THEN value END,
            {claim_set}
        WHERE name = %(name)s AND token = {expect_param}
            AND ((running AND {stale} AND attempt < %(max_attempts)s)
                OR (NOT running AND outcome = %(interrupted)s)
                OR (NOT running AND outcome = %(lost)s AND attempt < %(max_attempts)s))
        {claim_returning}
    """,
    claim_retry=CLAIM_RETRY,
    skip_slot="""
        UPDATE {task} SET next_run_at = {next_slot}, skipped = skipped + 1,
            schedule = %(schedule)s
        WHERE name = %(name)s AND running AND NOT ({stale}) AND {is_due_slot}
            AND {before_next}
    """,
    # As on PostgreSQL: a changed schedule moves the slot only earlier.
    ensure_schedule=f"""
        UPDATE {{task}} SET schedule = %(schedule)s, next_run_at = %(next)s
        WHERE name = %(name)s
            AND ((next_run_at IS NULL AND %(next)s IS NOT NULL)
                OR (NOT (schedule <=> %(schedule)s)
                    AND (%(next)s IS NULL OR %(next)s < next_run_at)))
        {MYSQL_STEP}
        INSERT INTO {{task}} ({{new_row_columns}})
        VALUES (%(name)s, NULL, 0, '', {{new_row_token}}, %(ttl)s, 0, '', '', '',
            0, 0, NULL, '', NULL, %(schedule)s, %(next)s)
    """,
    due_work=f"""
        SELECT {{due_columns}} FROM (
            SELECT t.*,
                t.running AND t.updated_at < n.ts - INTERVAL ROUND(t.ttl * 1000000) MICROSECOND
                    AS stale,
                t.next_run_at <= n.ts AS slot_due,
                TIMESTAMPDIFF(MICROSECOND, t.finished_at, n.ts) / 1000000.0 AS finished_age,
                n.ts AS db_now
            FROM {{task}} t CROSS JOIN (SELECT {_MYSQL_NOW} AS ts) n
        ) s
        ORDER BY name
    """,
    worker_beat=f"""
        UPDATE {{worker}} SET running = %(running)s, updated_at = {{now}} WHERE id = %(id)s
        {MYSQL_STEP}
        INSERT INTO {{worker}} (id, host, pid, tasks, concurrency, running, started_at,
            updated_at, ttl)
        VALUES (%(id)s, %(host)s, %(pid)s, %(tasks)s, %(concurrency)s, %(running)s, {{now}},
            {{now}}, %(ttl)s)
    """,
    worker_gone="DELETE FROM {worker} WHERE id = %(id)s",
    forget_workers=f"""
        DELETE FROM {{worker}}
        WHERE updated_at
            < {_MYSQL_NOW} - INTERVAL ROUND(GREATEST(%(seconds)s, ttl) * 1000000) MICROSECOND
    """,
    list_workers=f"""
        SELECT {{worker_columns}} FROM (
            SELECT w.*, TIMESTAMPDIFF(MICROSECOND, w.updated_at, n.ts) / 1000000.0 AS age
            FROM {{worker}} w CROSS JOIN (SELECT {_MYSQL_NOW} AS ts) n
        ) s
        ORDER BY host, pid
    """,
    clock="SELECT {now}",
)

# --- Change notifications (django_bgtasks.changes) ------------------------------
# PostgreSQL: migration 0008's trigger notifies this channel, with JSON
# {"name": ..., "token": ...}, for every change of a lease row but a bare
# heartbeat; each process's one listening connection runs LISTEN_CHANGES, and
# names itself CHANGES_APPLICATION (so an operator can find it in
# pg_stat_activity). SQLite and MySQL have no notifications: the feed there
# polls with list_states, one statement per process per interval.
CHANGES_CHANNEL = "bgtasks_changes"
LISTEN_CHANGES = f"LISTEN {CHANGES_CHANNEL}"
CHANGES_APPLICATION = "bgtasks-changes"
# Set once the connection proved direct (cursors.direct_session): through a
# pooler the name would stay on a server connection the feed doesn't hold.
NAME_APPLICATION = "SELECT set_config('application_name', %s, false)"
# Migration 0010's trigger notifies this one, with JSON {"queue": ...}, when a
# Django Task becomes ready (enqueued, retried, recovered); the same
# connection listens, for the workers' queue threads.
QUEUE_CHANNEL = "bgtasks_queue"
LISTEN_QUEUE = f"LISTEN {QUEUE_CHANNEL}"

_BY_VENDOR = {
    "postgresql": (POSTGRESQL, POSTGRESQL_FRAGMENTS),
    "sqlite": (SQLITE, SQLITE_FRAGMENTS),
    "mysql": (MYSQL, MYSQL_FRAGMENTS),
}
_ER_DUP_ENTRY = 1062
_RENDERED: dict[tuple[str, str, str, str], Statements] = {}


def vendor_list() -> str:
    """The supported vendors, for messages: "postgresql, sqlite and mysql"."""
    return f"{', '.join(SUPPORTED_VENDORS[:-1])} and {SUPPORTED_VENDORS[-1]}"


def time_param(connection: BaseDatabaseWrapper, value: dt.datetime) -> Any:
    """An aware ``value`` as the statements take a time: as it is on PostgreSQL;
    on SQLite, naive UTC text in the format the statements store; on MySQL, a
    naive UTC datetime (what Django stores)."""
    if connection.vendor == "sqlite":
        return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")
    if connection.vendor == "mysql":
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def run(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Any]:
    """Execute the rendered ``query`` of field ``statement`` and return its rows,
    as RETURNING gives them on PostgreSQL and SQLite: one statement there.

    On MySQL (MYSQL_RESULTS): ``rows`` fetches; ``count`` is one row per
    matched row; ``renew`` is ``(cancel_requested,)`` from which step
    matched, if one did. ``upsert`` runs the UPDATE, and only if it matched nothing
    the INSERT, and if that hits a row inserted meanwhile the UPDATE again
    (each step a compare-and-set in autocommit; a claim hands back its token,
    its LAST_INSERT_ID(expr), read in the UPDATE's own query: _claim_update).
    ``claim`` is a worker's claim and the read of what it claimed, two
    statements in one transaction on this connection.
    """
    if connection.vendor != "mysql":
        return fetch_all(connection, query, params)
    steps = query.split(MYSQL_STEP)
    how = MYSQL_RESULTS[statement]
    with connection.cursor() as cursor:
        if how == "rows":
            cursor.execute(query, params)
            return list(cursor.fetchall())
        if how == "count":
            cursor.execute(query, params)
            return [(1,)] * cursor.rowcount
        if how == "renew":
            for cancel_requested, step in enumerate(steps):
                cursor.execute(step, params)
                if cursor.rowcount:
                    return [(cancel_requested,)]
            return []
        if how == "upsert":
            update, insert = steps
            if statement != "claim":
                cursor.execute(update, params)
                matched = bool(cursor.rowcount)
            else:
                token = _claim_update(connection, cursor, update, params)
                matched = token is not None
            if not matched:
                try:
                    cursor.execute(insert, params)
                except IntegrityError as exc:
                    if getattr(exc.__cause__, "args", (None,))[0] != _ER_DUP_ENTRY:
                        raise
                    if statement != "claim":
                        cursor.execute(update, params)
                        return [(1,)] if cursor.rowcount else []
                    token = _claim_update(connection, cursor, update, params)
                    return [] if token is None else [(token,)]
                # An INSERT fires no trigger: its reply carries the token.
                token = _last_insert_id(cursor)
            return [(token,)] if statement == "claim" else [(1,)]
    update, select = steps
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(update, params)
        if not cursor.rowcount:
            return []
        cursor.execute(select, params)
        return list(cursor.fetchall())


# What the database checks read from a MySQL/MariaDB server (checks.py).
MYSQL_SERVER_SETTINGS = """
    SELECT @@session.time_zone, @@global.system_time_zone, @@session.sql_mode,
        @@global.log_bin, @@global.binlog_format
"""
MYSQL_TABLE_ENGINES = """
    SELECT table_name, engine FROM information_schema.tables
    WHERE table_schema = DATABASE() AND table_name IN (%(task)s, %(run)s, %(worker)s)
"""
# SYSDATE() is the time at execution, so it moves during a statement, unless
# the server runs with --sysdate-is-now (which no variable shows).
MYSQL_SYSDATE_MOVES = "SELECT SLEEP(0.01), TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) > 0"


@dataclass(frozen=True)
class MySQLServer:
    """What the database checks need to know of a MySQL/MariaDB server."""

    time_zone: str
    system_time_zone: str
    sql_mode: str
    log_bin: bool
    binlog_format: str
    engines: list[tuple[str, str]]
    sysdate_moves: bool


def mysql_server(
    connection: BaseDatabaseWrapper, *, task: str, run: str, worker: str
) -> MySQLServer:
    """Read the settings of this MySQL/MariaDB connection's server and
    session, and the storage engines of the tables ``task``, ``run`` and
    ``worker``."""
    with connection.cursor() as cursor:
        cursor.execute(MYSQL_SERVER_SETTINGS)
        time_zone, system_zone, sql_mode, log_bin, binlog_format = cursor.fetchone()
        cursor.execute(MYSQL_TABLE_ENGINES, {"task": task, "run": run, "worker": worker})
        engines = sorted((str(table), str(engine)) for table, engine in cursor.fetchall())
        cursor.execute(MYSQL_SYSDATE_MOVES)
        sysdate_moves = bool(cursor.fetchone()[1])
    return MySQLServer(
        time_zone=str(time_zone),
        system_time_zone=str(system_zone),
        sql_mode=str(sql_mode),
        log_bin=bool(log_bin),
        binlog_format=str(binlog_format),
        engines=engines,
        sysdate_moves=sysdate_moves,
    )


# A claim's UPDATE and the read of its token, sent as one query (one round
# trip) when the connection allows several statements in one (mysqlclient's
# default, CLIENT.MULTI_STATEMENTS; ``OPTIONS = {"multi_statements": False}``
# turns it off, and then the SELECT is a second round trip).
_CLAIMED_TOKEN = f"{MYSQL_STEP}SELECT LAST_INSERT_ID()"
_CLIENT_MULTI_STATEMENTS = 1 << 16  # MySQLdb.constants.CLIENT.MULTI_STATEMENTS


def multi_statements(connection: BaseDatabaseWrapper) -> bool:
    """Whether this open MySQL connection may send several statements in one query."""
    return bool(getattr(connection.connection, "client_flag", 0) & _CLIENT_MULTI_STATEMENTS)


def _claim_update(
    connection: BaseDatabaseWrapper, cursor: Any, update: str, params: dict[str, Any]
) -> int | None:
    """Run a claim's UPDATE on ``cursor``: the token it set if it matched the
    row, else ``None``. The token is its LAST_INSERT_ID(expr), read with
    ``SELECT LAST_INSERT_ID()`` right after it on the same session (nothing
    can come between), in the same round trip where the connection allows.
    When the UPDATE matched nothing, LAST_INSERT_ID() is whatever an earlier
    statement left, and is not read."""
    if not multi_statements(connection):
        cursor.execute(update, params)
        return _last_insert_id(cursor) if cursor.rowcount else None
    # An error in the UPDATE (a lock wait timeout, a deadlock) raises here,
    # and the server runs nothing after it.
    cursor.execute(update + _CLAIMED_TOKEN, params)
    matched = cursor.rowcount
    cursor.nextset()
    [(token,)] = cursor.fetchall()
    return int(token) if matched else None


def _last_insert_id(cursor: Any) -> int:
    """The LAST_INSERT_ID(expr) the statement just run on ``cursor`` set."""
    if cursor.lastrowid:
        return int(cursor.lastrowid)
    cursor.execute("SELECT LAST_INSERT_ID()")
    return int(cursor.fetchone()[0])


def statements(connection: BaseDatabaseWrapper, *, task: str, run: str, worker: str) -> Statements:
    """The statements for this connection's vendor, on the lease table ``task``,
    the history table ``run`` and the workers' table ``worker`` (unquoted
    ``db_table`` names), ready to execute."""
    # Keyed by vendor and tables alone: quoting is fixed per vendor, and a key
    # per connection object would grow with every thread.
    key = (connection.vendor, task, run, worker)
    try:
        return _RENDERED[key]
    except KeyError:
        pass
    try:
        templates, fragments = _BY_VENDOR[connection.vendor]
    except KeyError:
        raise NotSupportedError(
            f"django-bgtasks supports {vendor_list()}, "
            f"not {connection.vendor!r} (database {connection.alias!r})"
        ) from None
    quote = connection.ops.quote_name
    tables = {"task": quote(task), "run": quote(run), "worker": quote(worker)}
    keep_tables = {"task": "{task}", "run": "{run}", "worker": "{worker}"}
    rendered = Statements(
        **{
            # Fragments first (they may name the tables), then the tables.
            field.name: getattr(templates, field.name)
            .format(**fragments, **keep_tables)
            .format(**tables)
            for field in fields(Statements)
        }
    )
    _RENDERED[key] = rendered
    return rendered
