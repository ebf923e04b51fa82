"""PostgreSQL's statements: the lease operations and the workers', with the
fragments they share, the time parameters they take, and the names of the
channels pushed changes come on (the rules: :mod:`django_bgtasks.db.shared`);
the queue's are in :mod:`django_bgtasks.db.postgresql.queue`.

The clock is ``clock_timestamp()``: ``now()`` is frozen at transaction start.
Parameters that a statement repeats are cast, so that they keep one type under
server-side binding (the lease statements run prepared: ``db/cursor.py``).
"""

from __future__ import annotations

from django_bgtasks.db.shared import (
    CLAIM_REQUEST,
    CLAIM_RESUME,
    CLAIM_RETRY,
    CLAIM_SCHEDULED,
    DUE_COLUMNS,
    QUEUED_RUNNING,
    RENEW_MANY_COLUMNS,
    RENEW_QUEUED,
    RENEW_TASK,
    # (alike mysql/leases.py's list on purpose: the statements both take from shared)
    RUN_COLUMNS,
    SKIP_SLOT,
    STATE_COLUMNS,
    TAKE_SLOT,
    UNPAUSE,
    WORKER_COLUMNS,
    Statements,
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
        cancel_requested = false, outcome = '', error = '',
        skipped = paused_skipped, paused_skipped = 0,
        trigger = %(trigger)s, result = NULL, result_note = ''""",
    # A row that a request or a schedule creates before any claim: not running,
    # its token at the highest its history holds, so the first claim rises above it.
    "new_row_columns": """name, value, running, owner, token, ttl, cancel_requested,
        outcome, error, trigger, attempt, skipped, requested_at, requested_by, request,
        schedule, next_run_at""",
    "new_row_token": "COALESCE((SELECT max(token) FROM {run} WHERE name = %(name)s::text), 0)",
    "claim_returning": "RETURNING token, attempt, run_args, value, trace_context",
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
        INSERT INTO {task} AS t ({new_row_columns}, trace_context)
        VALUES (%(name)s::text, NULL, false, '', {new_row_token}, %(ttl)s, false, '', '', '',
            0, 0, clock_timestamp(), %(requested_by)s, %(request)s::jsonb, '', NULL,
            %(trace_context)s::text)
        ON CONFLICT (name) DO UPDATE
        SET requested_at = clock_timestamp(), requested_by = excluded.requested_by,
            request = excluded.request, trace_context = excluded.trace_context
        WHERE t.requested_at IS NULL
        RETURNING 1 AS matched
    """,
    # (Alike in sqlite/leases.py on purpose: the same statements, in each vendor's
    # own spelling of casts, booleans and the clock.)
    claim_request=CLAIM_REQUEST,
    claim_scheduled=CLAIM_SCHEDULED,
    claim_resume=CLAIM_RESUME,
    claim_retry=CLAIM_RETRY,
    skip_slot=SKIP_SLOT + "RETURNING 1 AS matched",
    # An operator's pause: on the row (created if need be), once.
    pause="""
        INSERT INTO {task} AS t ({new_row_columns}, paused_at)
        VALUES (%(name)s::text, NULL, false, '', {new_row_token}, %(ttl)s, false, '', '', '',
            0, 0, NULL, '', NULL, '', NULL, clock_timestamp())
        ON CONFLICT (name) DO UPDATE SET paused_at = clock_timestamp()
        WHERE t.paused_at IS NULL
        RETURNING 1 AS matched
    """,
    unpause=UNPAUSE + "RETURNING 1 AS matched",
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
    # NULL: a row written by a worker older than migration 0024.
    worker_lost="""
        UPDATE {worker} SET lost = COALESCE(lost, '[]'::jsonb) || %(lost)s::jsonb
        WHERE id = %(id)s
        RETURNING 1 AS matched
    """,
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
    # Both tables in one statement, by two data-modifying CTEs (db/shared.py's
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
            RETURNING t.name AS key, t.token, t.cancel_requested,
                EXTRACT(EPOCH FROM clock_timestamp() - t.started_at)::float8 AS age
        ), queued AS (
            UPDATE {{queued}} q SET updated_at = clock_timestamp()
            FROM jsonb_to_recordset(%(leases)s::jsonb -> 'queued')
                AS h(seq bigint, owner text, token bigint)
            WHERE q.seq = h.seq AND q.owner = h.owner AND q.token = h.token
                AND q.status = '{QUEUED_RUNNING}'
                AND q.updated_at >= clock_timestamp() - q.ttl * interval '1 second'
            RETURNING q.seq::text AS key, q.token, q.cancel_requested,
                EXTRACT(EPOCH FROM clock_timestamp() - q.last_attempted_at)::float8 AS age
        )
        SELECT {RENEW_MANY_COLUMNS} FROM (
            SELECT '{RENEW_TASK}' AS kind, key, token, cancel_requested, age FROM tasks
            UNION ALL
            SELECT '{RENEW_QUEUED}' AS kind, key, token, cancel_requested, age FROM queued
        ) renewed
    """,
)
