"""SQLite's statements: the lease operations, the workers' and the queue's,
with the fragments they share and the time parameters they take (the rules:
:mod:`django_bgtasks.db.rules`).

SQLite runs one writer at a time, so each statement is atomic against every
other process. Its 'now' is the database host's clock, which for an embedded
database is the only clock there is. Times are stored as the UTC text Django
uses for DateTimeField. ('%%' is a literal '%' once the parameters are in.)
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.cursor import fetch_all
from django_bgtasks.db.rows import Row
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
    NOT_PAUSED,
    PAUSED_QUEUES,
    QUEUE_INDEX,
    QUEUE_RETRY,
    QUEUED_RUNNING,
    RENEW_QUEUED,
    RENEW_TASK,
    SKIP_SLOT,
    STATE_COLUMNS,
    TAKE_SLOT,
    UNPAUSE,
    UNPAUSE_QUEUE,
    WORKER_COLUMNS,
    QueueStatements,
    Statements,
    distinct_values,
    queue_pick,
    queue_retry,
    ready_probe,
)

MIN_SQLITE_VERSION = (3, 35, 0)  # for RETURNING

_NOW = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def _age(column: str) -> str:
    """The seconds since the time in ``column``, by the database's clock."""
    return f"(julianday('now') - julianday({column})) * 86400.0"


_AGE = _age("updated_at")  # since the last heartbeat


def _after(seconds: str) -> str:
    """The time ``seconds`` (an SQL expression) from now, by the database's
    clock, as ``_NOW`` writes times (a retry's ``run_after``)."""
    return f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', julianday('now') + ({seconds}) / 86400.0)"


# Joins the statements of the one operation of several (renew_many), run by
# run_steps in one transaction.
STEP = "\n;\n"

FRAGMENTS = {
    "now": _NOW,
    "step": STEP,
    "stale": f"{_AGE} > ttl",
    "t_stale": f"{_age('t.updated_at')} > t.ttl",
    "holder": f"""name = %(name)s AND owner = %(owner)s AND running
        AND (%(token)s IS NULL OR token = %(token)s)
        AND NOT ({_AGE} > ttl)""",
    "state_columns": STATE_COLUMNS,
    "state_source": f"""(
        SELECT *, running AND {_AGE} > ttl AS stale, {_AGE} AS heartbeat_age
        FROM {{task}}
    )""",
    "due_columns": DUE_COLUMNS,
    "worker_columns": WORKER_COLUMNS,
    "claim_set": f"""running = 1, owner = %(owner)s, token = token + 1, ttl = %(ttl)s,
        started_at = {_NOW}, finished_at = NULL,
        updated_at = {_NOW}, cancel_requested = 0,
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
    "delay_passed": f"{_age('finished_at')} >= %(delay)s",
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
            SELECT *, running AND {_AGE} > ttl AS stale,
                julianday(next_run_at) <= julianday('now') AS slot_due,
                {_age("finished_at")} AS finished_age,
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
        WHERE {_AGE} > max(%(seconds)s, ttl)
        RETURNING 1 AS matched
    """,
    list_workers=f"""
        SELECT {{worker_columns}} FROM (
            SELECT *, {_AGE} AS age
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
        UPDATE {{task}} SET updated_at = {_NOW}
        WHERE (name, owner, token) IN (
                SELECT json_extract(value, '$.name'), json_extract(value, '$.owner'),
                    json_extract(value, '$.token')
                FROM json_each(%(leases)s, '$.tasks'))
            AND running AND NOT ({_AGE} > ttl)
        RETURNING '{RENEW_TASK}' AS kind, name AS key, token, cancel_requested,
            {_age("started_at")} AS age
        {{step}}
        UPDATE {{queued}} SET updated_at = {_NOW}
        WHERE (seq, owner, token) IN (
                SELECT json_extract(value, '$.seq'), json_extract(value, '$.owner'),
                    json_extract(value, '$.token')
                FROM json_each(%(leases)s, '$.queued'))
            AND status = '{QUEUED_RUNNING}' AND {_AGE} <= ttl
        RETURNING '{RENEW_QUEUED}' AS kind, CAST(seq AS TEXT) AS key, token, cancel_requested,
            {_age("last_attempted_at")} AS age
    """,
)


# The queue's (Django Tasks).
_LIVE = f"{_AGE} <= ttl"

# The backend's enqueue (db.rules.ENQUEUE_COLUMNS): the tasks of one Task, in
# one statement whatever their number, stored in the order of ``rows``. (The
# WHERE is SQLite's rule for an INSERT ... SELECT with an ON CONFLICT clause.)
_ENQUEUE = f"""
    INSERT INTO {{table}} ({ENQUEUE_COLUMNS})
    SELECT json_extract(value, '$.uuid'), %(task_path)s, %(backend)s, %(queue_name)s,
        %(priority)s, %(takes_context)s, json_extract(value, '$.args_kwargs'), %(run_after)s,
        '{{ready}}', 0, %(max_attempts)s, '[]', '[]', '', 0, %(ttl)s, 0, %(unique_key)s,
        %(active_key)s, %(trace_context)s,
        json_extract(value, '$.concurrency_key'), %(concurrency)s,
        json_extract(value, '$.rate_key'), %(rate_limit)s, %(rate_period)s
    FROM json_each(%(rows)s) WHERE true
    ORDER BY key
    ON CONFLICT (active_key) DO NOTHING
    RETURNING uuid, enqueued_at
"""

# The flow limits (db/rules.py): one writer at a time, so the claim counts
# the free slots of each candidate's keys and takes the candidates whose rank
# within their key is within that count; migration 0013's trigger takes the
# slots of the rows it sets RUNNING, by the same 'now'. A rate slot is free
# once its start is a window ago (to the millisecond the times are kept in).
# (Counted up to the claim's limit: a key of 10,000 slots costs what one of
# ten does. Each count reads the free slots first, from an index: the
# concurrency slots by their holder, NULL for a free one; the rate slots by
# their last start, never-started and oldest first. Read by slot number, a
# count stepped over every slot held, or started within the window, first.)
_FREE_SLOTS = """(SELECT count(*) FROM (SELECT 1 FROM {{slots}} s INDEXED BY {index}
    WHERE s.kind = '{{{kind}}}' AND s.flow_key = t.{kind}_key AND s.slot <= t.{limit} AND {free}
    {order}LIMIT %(limit)s))"""
# (The two alike on purpose: one template, with each kind's index, test and order.)
_C_FREE_SLOTS = _FREE_SLOTS.format(
    index="bgtasks_flow_slot_holder",
    kind="concurrency",
    limit="concurrency",
    free="s.seq IS NULL",
    order="",
)
_R_FREE_SLOTS = _FREE_SLOTS.format(
    index="bgtasks_flow_slot_started",
    kind="rate",
    limit="rate_limit",
    free="(s.started_at IS NULL OR (julianday('now') - julianday(s.started_at)) * 86400.0"
    " >= t.rate_period - 0.0005)",
    order="ORDER BY s.started_at ",
)

# The ready rows a claim may take, as rules.queue_pick has them: of every
# queue, in the claim's order from its index (status, priority DESC, seq:
# migration 0018); of one named queue, from the ready rows' index led by the
# queue (status, queue_name, priority DESC, seq). ``INDEXED BY`` holds each
# to its index, whatever statistics ``ANALYZE`` (or ``PRAGMA optimize``)
# gathered. Each with the row's ``flow`` test, at most ``limit`` rows (also
# the idle poll's, without the flow test).
_DUE = f"""(run_after IS NULL OR julianday(run_after) <= julianday('now'))
            AND {NOT_PAUSED}"""


def _ready_rows(columns: str, flow: str, limit: str) -> str:
    """The pick (rules.queue_pick) of the ready rows' ``columns`` (and their
    ``priority`` and ``seq``) that pass ``flow``: every queue's, or one's."""
    return queue_pick(
        f"""SELECT seq, priority, {columns} FROM {{table}} t INDEXED BY bgtasks_queued_claim
            WHERE status = '{{ready}}' AND {_DUE} AND {flow}
            ORDER BY priority DESC, seq LIMIT {limit}""",
        f"""SELECT seq, priority, {columns} FROM {{table}} t INDEXED BY bgtasks_queued_ready
            WHERE status = '{{ready}}'
                AND queue_name = json_extract(%(queues)s, '$[{QUEUE_INDEX}]')
                AND {_DUE} AND {flow}
            ORDER BY priority DESC, seq LIMIT {limit}""",
        limit,
    )


# The rows of a bulk action's batch: the JSON array ``seqs``.
_LISTED = "seq IN (SELECT value FROM json_each(%(seqs)s))"


def _cancel(rows: str, returning: str) -> str:
    """An operator's cancel of the rows the condition ``rows`` names, as
    postgresql_queue.py's."""
    return f"""
        UPDATE {{table}} SET cancel_requested = 1,
            status = CASE WHEN status = '{{ready}}' THEN '{{failed}}' ELSE status END,
            active_key = CASE WHEN status = '{{ready}}' THEN NULL ELSE active_key END,
            finished_at = CASE WHEN status = '{{ready}}' THEN {_NOW} ELSE finished_at END,
            errors = CASE WHEN status = '{{ready}}' THEN json_insert(errors, '$[#]', json_object(
                'exception_class_path', '{CANCELLED_ERROR_CLASS}',
                'traceback', 'TaskCancelled: cancelled by an operator before it started'))
                ELSE errors END
        WHERE {rows} AND status IN ('{{ready}}', '{{running}}')
        RETURNING {returning}
    """


QUEUE = QueueStatements(
    claim=f"""
        UPDATE {{table}} SET status = '{{running}}', owner = %(owner)s, token = token + 1,
            updated_at = {_NOW}, cancel_requested = 0,
            started_at = COALESCE(started_at, {_NOW}), last_attempted_at = {_NOW},
            attempts = attempts + 1, worker_ids = json_insert(worker_ids, '$[#]', %(owner)s)
        WHERE seq IN (
            SELECT seq FROM (
                SELECT seq, rate_key, rfree,
                    row_number() OVER (PARTITION BY rate_key ORDER BY priority DESC, seq)
                        AS rrank
                FROM (
                    SELECT seq, priority, concurrency_key, rate_key, cfree, rfree,
                        row_number() OVER (
                            PARTITION BY concurrency_key ORDER BY priority DESC, seq
                        ) AS crank
                    FROM (
                        SELECT seq, priority, concurrency_key, rate_key,
                            CASE WHEN concurrency_key IS NOT NULL THEN {_C_FREE_SLOTS} END
                                AS cfree,
                            CASE WHEN rate_key IS NOT NULL THEN {_R_FREE_SLOTS} END AS rfree
                        FROM ({
        _ready_rows(
            "concurrency_key, concurrency, rate_key, rate_limit, rate_period",
            f"(concurrency_key IS NULL OR {_C_FREE_SLOTS} > 0)"
            f" AND (rate_key IS NULL OR {_R_FREE_SLOTS} > 0)",
            "%(limit)s",
        )
    }) t
                        ORDER BY priority DESC, seq
                        LIMIT %(limit)s
                    )
                )
                WHERE concurrency_key IS NULL OR crank <= cfree
            )
            WHERE rate_key IS NULL OR rrank <= rfree
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
            active_key = CASE WHEN %(status)s = '{{ready}}' THEN active_key END,
            run_after = CASE WHEN %(delay)s > 0 THEN {_after("%(delay)s")} ELSE run_after END
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = '{{running}}' AND {_LIVE}
        RETURNING status, finished_at
    """,
    # As ``finish``, for every ending in the JSON array ``ends`` at once: each
    # row fenced alike (its seq, owner, token, RUNNING and a live lease).
    finish_many=f"""
        UPDATE {{table}} SET status = e.status, updated_at = {_NOW},
            finished_at = CASE WHEN e.status = '{{ready}}' THEN NULL ELSE {_NOW} END,
            return_value = e.return_value,
            errors = CASE WHEN e.error IS NULL THEN errors
                ELSE json_insert(errors, '$[#]', json(e.error)) END,
            attempts = attempts - e.refund,
            active_key = CASE WHEN e.status = '{{ready}}' THEN active_key END,
            run_after = CASE WHEN e.delay > 0 THEN {_after("e.delay")} ELSE run_after END
        FROM (
            SELECT json_extract(value, '$.seq') AS seq, json_extract(value, '$.owner') AS owner,
                json_extract(value, '$.token') AS token,
                json_extract(value, '$.status') AS status,
                json_extract(value, '$.return_value') AS return_value,
                json_extract(value, '$.error') AS error, json_extract(value, '$.refund') AS refund,
                json_extract(value, '$.delay') AS delay
            FROM json_each(%(ends)s)
        ) AS e
        WHERE {{table}}.seq = e.seq AND {{table}}.owner = e.owner AND {{table}}.token = e.token
            AND {{table}}.status = '{{running}}' AND {_LIVE}
        RETURNING seq, status, finished_at
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
        RETURNING uuid, status, task_path, owner
    """,
    cancel=_cancel("uuid = %(uuid)s", "status"),
    cancel_many=_cancel(_LISTED, "seq, status"),
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
        RETURNING seq, uuid, task_path
    """,
    retry=QUEUE_RETRY,
    retry_many=queue_retry(_LISTED, "RETURNING seq"),
    enqueue=_ENQUEUE,
    pause_queue=f"""
        INSERT INTO {{paused}} (queue_name, paused_at) VALUES (%(queue)s, {_NOW})
        ON CONFLICT (queue_name) DO NOTHING
        RETURNING 1 AS matched
    """,
    unpause_queue=UNPAUSE_QUEUE + " RETURNING 1 AS matched",
    paused_queues=PAUSED_QUEUES,
    # (The operator's reads alike on every vendor: rules.distinct_values.)
    queue_names=distinct_values("queue_name"),
    task_paths=distinct_values("task_path"),
    any_ready=ready_probe(_ready_rows("1 AS due", "1", "1")),
)


# The statements of several steps, and how they run.
STEPPED = frozenset({"renew_many"})


def run_steps(connection: BaseDatabaseWrapper, query: str, params: dict[str, Any]) -> list[Row]:
    """The steps of ``query`` in one transaction, and every row they return."""
    rows: list[Row] = []
    with transaction.atomic(using=connection.alias):
        for step in query.split(STEP):
            rows.extend(fetch_all(connection, step, params))
    return rows


def time_param(value: dt.datetime) -> str:
    """An aware ``value`` as the statements take a time: naive UTC text in
    the format the statements store."""
    return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(" ", "milliseconds")
