"""SQLite's statements of the lease operations and the workers', with the
fragments they share (the rules: :mod:`django_bgtasks.db.shared`); the
queue's are :mod:`django_bgtasks.db.sqlite.queue`'s.

SQLite runs one writer at a time, so each statement is atomic against every
other process. Its 'now' is the database host's clock, which for an embedded
database is the only clock there is. Times are stored as the UTC text Django
uses for DateTimeField. ('%%' is a literal '%' once the parameters are in.)
"""

from __future__ import annotations

from django_bgtasks.db.shared import (
    CLAIM_REQUEST,
    CLAIM_RESUME,
    CLAIM_RETRY,
    CLAIM_SCHEDULED,
    DUE_COLUMNS,
    QUEUED_RUNNING,
    RENEW_QUEUED,
    RENEW_TASK,
    SKIP_SLOT,
    STATE_COLUMNS,
    TAKE_SLOT,
    UNPAUSE,
    WORKER_COLUMNS,
    Statements,
)

MIN_SQLITE_VERSION = (3, 35, 0)  # for RETURNING

NOW = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def age(column: str) -> str:
    """The seconds since the time in ``column``, by the database's clock."""
    return f"(julianday('now') - julianday({column})) * 86400.0"


AGE = age("updated_at")  # since the last heartbeat


def after(seconds: str) -> str:
    """The time ``seconds`` (an SQL expression) from now, by the database's
    clock, as ``NOW`` writes times (a retry's ``run_after``)."""
    return f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', julianday('now') + ({seconds}) / 86400.0)"


# Joins the statements of the one operation of several (renew_many), run by
# run_steps in one transaction.
STEP = "\n;\n"

FRAGMENTS = {
    "now": NOW,
    "step": STEP,
    "stale": f"{AGE} > ttl",
    "t_stale": f"{age('t.updated_at')} > t.ttl",
    "holder": f"""name = %(name)s AND owner = %(owner)s AND running
        AND (%(token)s IS NULL OR token = %(token)s)
        AND NOT ({AGE} > ttl)""",
    "state_columns": STATE_COLUMNS,
    "state_source": f"""(
        SELECT *, running AND {AGE} > ttl AS stale, {AGE} AS heartbeat_age
        FROM {{task}}
    )""",
    "due_columns": DUE_COLUMNS,
    "worker_columns": WORKER_COLUMNS,
    "claim_set": f"""running = 1, owner = %(owner)s, token = token + 1, ttl = %(ttl)s,
        started_at = {NOW}, finished_at = NULL,
        updated_at = {NOW}, cancel_requested = 0,
        outcome = '', error = '', skipped = paused_skipped, paused_skipped = 0,
        trigger = %(trigger)s, result = NULL, result_note = ''""",
    "new_row_columns": """name, value, running, owner, token, ttl, cancel_requested,
        outcome, error, trigger, attempt, skipped, requested_at, requested_by, request,
        schedule, next_run_at""",
    "new_row_token": "COALESCE((SELECT max(token) FROM {run} WHERE name = %(name)s), 0)",
    "claim_returning": "RETURNING token, attempt, run_args, value, trace_context",
    # Slot times are passed as naive UTC text, as the statements store times.
    "before_next": "julianday('now') < julianday(%(next)s)",
    # The same instant, whichever text form it was written in.
    "is_due_slot": "julianday(next_run_at) = julianday(%(due)s)",
    "next_slot": "%(next)s",
    "resume_param": "%(resume)s",
    "expect_param": "%(expect)s",
    "delay_passed": f"{age('finished_at')} >= %(delay)s",
}

STATEMENTS = Statements(
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
        RETURNING 1 AS matched
    """,
    force_release="""
        UPDATE {task}
        SET running = 0, finished_at = {now}, outcome = %(outcome)s, error = %(error)s
        WHERE name = %(name)s AND running AND (%(token)s IS NULL OR token = %(token)s)
        RETURNING 1 AS matched
    """,
    request_cancel="""
        UPDATE {task} SET cancel_requested = 1
        WHERE name = %(name)s AND running AND NOT ({stale})
            AND (%(token)s IS NULL OR token = %(token)s)
        RETURNING 1 AS matched
    """,
    expire_stale="""
        UPDATE {task}
        SET running = 0, finished_at = updated_at, outcome = %(outcome)s, error = %(error)s
        WHERE running AND {stale} AND (%(name)s IS NULL OR name = %(name)s)
            AND (%(token)s IS NULL OR token = %(token)s)
        RETURNING 1 AS matched
    """,
    # SQLite has no row locks: a no-op write takes the database's write lock,
    # which every takeover needs too, until the caller's transaction ends.
    fence="UPDATE {task} SET updated_at = updated_at WHERE {holder} RETURNING 1 AS matched",
    get_state="SELECT {state_columns} FROM {state_source} WHERE name = %(name)s",
    list_states="SELECT {state_columns} FROM {state_source} ORDER BY name",
    request_run="""
        INSERT INTO {task} AS t ({new_row_columns}, trace_context)
        VALUES (%(name)s, NULL, 0, '', {new_row_token}, %(ttl)s, 0, '', '', '',
            0, 0, {now}, %(requested_by)s, %(request)s, '', NULL, %(trace_context)s)
        ON CONFLICT (name) DO UPDATE
        SET requested_at = excluded.requested_at, requested_by = excluded.requested_by,
            request = excluded.request, trace_context = excluded.trace_context
        WHERE t.requested_at IS NULL
        RETURNING 1 AS matched
    """,
    claim_request=CLAIM_REQUEST,
    claim_scheduled=CLAIM_SCHEDULED,
    claim_resume=CLAIM_RESUME,
    claim_retry=CLAIM_RETRY,
    skip_slot=SKIP_SLOT + "RETURNING 1 AS matched",
    pause="""
        INSERT INTO {task} AS t ({new_row_columns}, paused_at)
        VALUES (%(name)s, NULL, 0, '', {new_row_token}, %(ttl)s, 0, '', '', '',
            0, 0, NULL, '', NULL, '', NULL, {now})
        ON CONFLICT (name) DO UPDATE SET paused_at = excluded.paused_at
        WHERE t.paused_at IS NULL
        RETURNING 1 AS matched
    """,
    unpause=UNPAUSE + "RETURNING 1 AS matched",
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
        RETURNING 1 AS matched
    """,
    take_slot=TAKE_SLOT + "RETURNING 1 AS matched",
    due_work=f"""
        SELECT {{due_columns}} FROM (
            SELECT *, running AND {AGE} > ttl AS stale,
                julianday(next_run_at) <= julianday('now') AS slot_due,
                {age("finished_at")} AS finished_age,
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
        RETURNING 1 AS matched
    """,
    worker_gone="DELETE FROM {worker} WHERE id = %(id)s RETURNING 1 AS matched",
    # NULL: a row written by a worker older than migration 0024. The list
    # is read back in its order (json_each's key is the index).
    worker_lost="""
        UPDATE {worker} SET lost = (
            SELECT json_group_array(value) FROM (
                SELECT 0 AS part, key, value FROM json_each(COALESCE(lost, '[]'))
                UNION ALL
                SELECT 1, key, value FROM json_each(%(lost)s)
                ORDER BY part, key
            )
        )
        WHERE id = %(id)s
        RETURNING 1 AS matched
    """,
    forget_workers=f"""
        DELETE FROM {{worker}}
        WHERE {AGE} > max(%(seconds)s, ttl)
        RETURNING 1 AS matched
    """,
    list_workers=f"""
        SELECT {{worker_columns}} FROM (
            SELECT *, {AGE} AS age
            FROM {{worker}}
        )
        ORDER BY host, pid
    """,
    clock="SELECT {now} AS db_now",
    # SQLite has no data-modifying CTEs, so no single statement can update
    # two tables: the two heartbeats (each its table's own, rows matched from
    # the JSON by key, owner and token) run as two statements in ONE
    # transaction (run_steps): one commit, and one hold of the write lock,
    # which SQLite takes for any write anyway.
    renew_many=f"""
        UPDATE {{task}} SET updated_at = {NOW}
        WHERE (name, owner, token) IN (
                SELECT json_extract(value, '$.name'), json_extract(value, '$.owner'),
                    json_extract(value, '$.token')
                FROM json_each(%(leases)s, '$.tasks'))
            AND running AND NOT ({AGE} > ttl)
        RETURNING '{RENEW_TASK}' AS kind, name AS key, token, cancel_requested,
            {age("started_at")} AS age
        {{step}}
        UPDATE {{queued}} SET updated_at = {NOW}
        WHERE (seq, owner, token) IN (
                SELECT json_extract(value, '$.seq'), json_extract(value, '$.owner'),
                    json_extract(value, '$.token')
                FROM json_each(%(leases)s, '$.queued'))
            AND status = '{QUEUED_RUNNING}' AND {AGE} <= ttl
        RETURNING '{RENEW_QUEUED}' AS kind, CAST(seq AS TEXT) AS key, token, cancel_requested,
            {age("last_attempted_at")} AS age
    """,
)
