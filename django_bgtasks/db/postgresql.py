"""PostgreSQL's statements: the lease operations, the workers' and the queue's,
with the fragments they share, the time parameters they take, and the names of
the channels pushed changes come on (the rules: :mod:`django_bgtasks.db.rules`).

The clock is ``clock_timestamp()``: ``now()`` is frozen at transaction start.
Parameters that a statement repeats are cast, so that they keep one type under
server-side binding (the lease statements run prepared: ``db/cursor.py``).
"""

from __future__ import annotations

import datetime as dt

from django_bgtasks.db.rules import (
    CANCELLED_ERROR_CLASS,
    CLAIM_COLUMNS,
    CLAIM_REQUEST,
    CLAIM_RESUME,
    CLAIM_RETRY,
    CLAIM_SCHEDULED,
    DUE_COLUMNS,
    ENQUEUE_COLUMNS,
    LOST_ERROR_CLASS,
    QUEUE_RETRY,
    QUEUED_RUNNING,
    RENEW_MANY_COLUMNS,
    RENEW_QUEUED,
    RENEW_TASK,
    RUN_COLUMNS,
    SKIP_SLOT,
    STATE_COLUMNS,
    TAKE_SLOT,
    WORKER_COLUMNS,
    QueueStatements,
    Statements,
    flow_slots_free,
)

FRAGMENTS = {
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

STATEMENTS = Statements(
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
        SELECT 1 AS matched FROM ended
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
        SELECT 1 AS matched FROM ended
    """,
    request_cancel="""
        UPDATE {task} SET cancel_requested = true
        WHERE name = %(name)s AND running AND {live}
            AND (%(token)s::bigint IS NULL OR token = %(token)s::bigint)
        RETURNING 1 AS matched
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
        SELECT 1 AS matched FROM ended
    """,
    # Locks the row for the caller's transaction: a takeover, whose claim
    # locks the same row, waits until that transaction ends. A no-op write,
    # not SELECT ... FOR UPDATE: an UPDATE that waited on a row lock re-checks
    # its WHERE only if the row was modified meanwhile. A heartbeat sent just
    # before the holder froze inside its fenced transaction would otherwise
    # renew the lease on a staleness check made before the freeze; with a new
    # row version it re-checks staleness by the clock after the wait.
    fence="UPDATE {task} SET updated_at = updated_at WHERE {holder} RETURNING 1 AS matched",
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
        RETURNING 1 AS matched
    """,
    # (Alike in sqlite.py on purpose: the same statements, in each vendor's
    # own spelling of casts, booleans and the clock.)
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
        RETURNING 1 AS matched
    """,
    take_slot=TAKE_SLOT + "RETURNING 1 AS matched",
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
        RETURNING 1 AS matched
    """,
    worker_gone="DELETE FROM {worker} WHERE id = %(id)s RETURNING 1 AS matched",
    # Never a row whose own ttl is longer (a worker that is merely slow to beat).
    forget_workers="""
        DELETE FROM {worker}
        WHERE updated_at < clock_timestamp()
            - GREATEST(%(seconds)s, ttl) * interval '1 second'
        RETURNING 1 AS matched
    """,
    list_workers="""
        SELECT {worker_columns} FROM (
            SELECT w.*, EXTRACT(EPOCH FROM clock_timestamp() - w.updated_at)::float8 AS age
            FROM {worker} w
        ) s
        ORDER BY host, pid
    """,
    clock="SELECT clock_timestamp() AS db_now",
    # Both tables in one statement, by two data-modifying CTEs (db/rules.py's
    # RENEW_MANY). Each UPDATE is its table's own heartbeat, rows matched from
    # the JSON by key, owner and token; the lease table's writes updated_at
    # alone (a HOT update, as ``renew``). The rows come sorted by key
    # (renew_many_param), so the locks are taken in key order, as a batched
    # finish of the same worker's queued rows takes them.
    renew_many=f"""
        WITH tasks AS (
            UPDATE {{task}} t SET updated_at = clock_timestamp()
            FROM jsonb_to_recordset(%(leases)s::jsonb -> 'tasks')
                AS h(name text, owner text, token bigint)
            WHERE t.name = h.name AND t.owner = h.owner AND t.token = h.token AND t.running
                AND t.updated_at >= clock_timestamp() - t.ttl * interval '1 second'
            RETURNING t.name AS key, t.token, t.cancel_requested
        ), queued AS (
            UPDATE {{queued}} q SET updated_at = clock_timestamp()
            FROM jsonb_to_recordset(%(leases)s::jsonb -> 'queued')
                AS h(seq bigint, owner text, token bigint)
            WHERE q.seq = h.seq AND q.owner = h.owner AND q.token = h.token
                AND q.status = '{QUEUED_RUNNING}'
                AND q.updated_at >= clock_timestamp() - q.ttl * interval '1 second'
            RETURNING q.seq::text AS key, q.token, q.cancel_requested
        )
        SELECT {RENEW_MANY_COLUMNS} FROM (
            SELECT '{RENEW_TASK}' AS kind, key, token, cancel_requested FROM tasks
            UNION ALL
            SELECT '{RENEW_QUEUED}' AS kind, key, token, cancel_requested FROM queued
        ) renewed
    """,
)


# The queue's (Django Tasks).
# The backend's enqueue (db.rules.ENQUEUE_COLUMNS): the tasks of one Task, in
# one statement whatever their number, stored in the order of ``rows``.
_ENQUEUE = f"""
    INSERT INTO {{table}} ({ENQUEUE_COLUMNS})
    SELECT (r.item ->> 'uuid')::uuid, %(task_path)s::text, %(backend)s::text,
        %(queue_name)s::text, %(priority)s::integer, %(takes_context)s::boolean,
        r.item -> 'args_kwargs', %(run_after)s::timestamptz, '{{ready}}', 0,
        %(max_attempts)s::integer, '[]'::jsonb, '[]'::jsonb, '', 0, %(ttl)s::float8, false,
        %(unique_key)s::text, %(active_key)s::text,
        r.item ->> 'concurrency_key', %(concurrency)s::integer, r.item ->> 'rate_key',
        %(rate_limit)s::integer, %(rate_period)s::float8
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS r(item, n)
    ORDER BY r.n
    ON CONFLICT (active_key) DO NOTHING
    RETURNING replace(uuid::text, '-', '') AS uuid,
        to_char(enqueued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS enqueued_at
"""

# The claim (db/rules.py says how the flow limits are kept): ``cand`` locks
# the first ready rows whose keys have a free slot, ``cfree`` and ``rfree``
# lock as many free slots of each key as it has candidates (no more: a key of
# 10,000 slots costs what a key of 10 does; a rate key's oldest starts first,
# by migration 0013's index), ``concurrent`` pairs each candidate with
# the free slot of its rank within its concurrency key, and ``claimed`` those
# that got one (or need none) with the free slot of their rank within their
# rate key, ``took`` writes the slots
# taken and the UPDATE claims the rows that got every slot they need. For
# tasks without limits, the slot CTEs read nothing.
# A rate slot is free once its last start is a window ago: the window of
# the row being claimed (``t``), or the longest of the candidates of its key
# (``w``).
_RATE_SLOT_FREE = "(s.started_at IS NULL OR s.started_at <= clock_timestamp() - {window})"
_T_WINDOW = "t.rate_period * interval '1 second'"
# Whether the rate key of ``t`` has a free slot: its oldest start (never
# started first), read from migration 0013's index, is a window ago.
_T_RATE_FREE = f"""EXISTS (
                    SELECT 1 FROM (
                        SELECT s.started_at FROM {{slots}} s
                        WHERE s.kind = '{{rate}}' AND s.flow_key = t.rate_key
                            AND s.slot <= t.rate_limit
                        ORDER BY s.started_at NULLS FIRST LIMIT 1
                    ) s
                    WHERE {_RATE_SLOT_FREE.format(window=_T_WINDOW)})"""
_W_RATE_SLOT_FREE = _RATE_SLOT_FREE.format(window="w.period * interval '1 second'")


def _paired(rows: str, key: str, limit: str, free: str, *, slot: str) -> str:
    """The rows of the CTE ``rows`` that may take a slot of their ``key``
    (a column), with the id of the one they take as ``slot``: the n-th row of
    a key (in the claim's order) takes the n-th free slot of the CTE ``free``
    within its ``limit``; a row without the key passes, with no slot."""
    return f"""SELECT r.*, f.id AS {slot}
            FROM (
                SELECT {rows}.*,
                    row_number() OVER (PARTITION BY {key} ORDER BY priority DESC, seq)
                        AS {slot}_rank
                FROM {rows}
            ) r
            LEFT JOIN (
                SELECT *, row_number() OVER (PARTITION BY flow_key ORDER BY slot) AS rank
                FROM {free}
            ) f ON f.flow_key = r.{key} AND f.rank = r.{slot}_rank AND f.slot <= r.{limit}
            WHERE r.{key} IS NULL OR f.id IS NOT NULL"""


QUEUE = QueueStatements(
    claim=f"""
        WITH cand AS (
            SELECT seq, token, priority, concurrency_key, concurrency, rate_key, rate_limit,
                rate_period
            FROM {{table}} t
            WHERE status = '{{ready}}'
                AND (%(all)s::boolean OR queue_name = ANY(%(queues)s::text[]))
                AND (run_after IS NULL OR run_after <= clock_timestamp())
                AND {flow_slots_free(_T_RATE_FREE)}
            ORDER BY priority DESC, seq
            LIMIT %(limit)s::integer
            FOR UPDATE SKIP LOCKED
        ), cfree AS (
            SELECT f.* FROM (
                SELECT concurrency_key AS key, count(*) AS wanted, max(concurrency) AS most
                FROM cand WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key
            ) w CROSS JOIN LATERAL (
                SELECT s.id, s.flow_key, s.slot FROM {{slots}} s
                WHERE s.kind = '{{concurrency}}' AND s.flow_key = w.key AND s.slot <= w.most
                    AND s.seq IS NULL
                ORDER BY s.slot
                LIMIT w.wanted
                FOR UPDATE SKIP LOCKED
            ) f
        ), rfree AS (
            SELECT f.* FROM (
                SELECT rate_key AS key, count(*) AS wanted, max(rate_limit) AS most,
                    max(rate_period) AS period
                FROM cand WHERE rate_key IS NOT NULL GROUP BY rate_key
            ) w CROSS JOIN LATERAL (
                SELECT s.id, s.flow_key, s.slot FROM {{slots}} s
                WHERE s.kind = '{{rate}}' AND s.flow_key = w.key AND s.slot <= w.most
                    AND {_W_RATE_SLOT_FREE}
                ORDER BY s.started_at NULLS FIRST
                LIMIT w.wanted
                FOR UPDATE SKIP LOCKED
            ) f
        ), concurrent AS (
            {_paired("cand", "concurrency_key", "concurrency", "cfree", slot="cslot")}
        ), claimed AS (
            {_paired("concurrent", "rate_key", "rate_limit", "rfree", slot="rslot")}
        ), took AS (
            UPDATE {{slots}} s SET seq = c.seq, token = c.token + 1,
                started_at = CASE WHEN s.id = c.rslot THEN clock_timestamp()
                    ELSE s.started_at END
            FROM claimed c
            WHERE s.id = c.cslot OR s.id = c.rslot
        )
        UPDATE {{table}} SET status = '{{running}}', owner = %(owner)s::text, token = token + 1,
            updated_at = clock_timestamp(), cancel_requested = false,
            started_at = COALESCE(started_at, clock_timestamp()),
            last_attempted_at = clock_timestamp(), attempts = attempts + 1,
            worker_ids = worker_ids || jsonb_build_array(%(owner)s::text)
        WHERE seq IN (SELECT seq FROM claimed)
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
    # As ``finish``, for every ending in the JSON array ``ends`` at once: each
    # row fenced alike (its seq, owner, token, RUNNING and a live lease).
    finish_many="""
        UPDATE {table} AS t SET status = e.status, updated_at = clock_timestamp(),
            finished_at = CASE WHEN e.status = '{ready}' THEN NULL ELSE clock_timestamp() END,
            return_value = e.return_value::jsonb,
            errors = CASE WHEN e.error IS NULL THEN t.errors
                ELSE t.errors || jsonb_build_array(e.error) END,
            attempts = t.attempts - e.refund,
            active_key = CASE WHEN e.status = '{ready}' THEN t.active_key END
        FROM jsonb_to_recordset(%(ends)s::jsonb) AS e(seq bigint, owner text, token bigint,
            status text, return_value text, error jsonb, refund integer)
        WHERE t.seq = e.seq AND t.owner = e.owner AND t.token = e.token
            AND t.status = '{running}'
            AND t.updated_at >= clock_timestamp() - t.ttl * interval '1 second'
        RETURNING t.seq AS seq, t.status AS status, t.finished_at AS finished_at
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
    retry=QUEUE_RETRY,
    enqueue=_ENQUEUE,
)


# --- Change notifications (django_bgtasks.push.feed) ----------------------------
# PostgreSQL: migration 0008's trigger notifies this channel, with JSON
# {"name": ..., "token": ...}, for every change of a lease row but a bare
# heartbeat; each process's one listening connection runs LISTEN_CHANGES, and
# names itself CHANGES_APPLICATION (so an operator can find it in
# pg_stat_activity). SQLite and MySQL have no notifications: the feed there
# polls with list_states, one statement per process per interval.
CHANGES_CHANNEL = "bgtasks_changes"
LISTEN_CHANGES = f"LISTEN {CHANGES_CHANNEL}"
CHANGES_APPLICATION = "bgtasks-changes"
# Set once the connection proved direct (cursor.direct_session): through a
# pooler the name would stay on a server connection the feed doesn't hold.
NAME_APPLICATION = "SELECT set_config('application_name', %s, false)"
# Migration 0010's trigger notifies this one, with JSON {"queue": ...}, when a
# Django Task becomes ready (enqueued, retried, recovered); the same
# connection listens, for the workers' queue threads.
QUEUE_CHANNEL = "bgtasks_queue"
LISTEN_QUEUE = f"LISTEN {QUEUE_CHANNEL}"


def time_param(value: dt.datetime) -> dt.datetime:
    """An aware ``value`` as the statements take a time: as it is."""
    return value
