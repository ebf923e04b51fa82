"""SQLite's statements of the queue (Django Tasks): enqueue, the claim with
its flow limits and paused queues, renew, finish, the ends of several runs,
give back, recover, cancel and retry (the rules:
:mod:`django_bgtasks.db.shared`). The clock and times are the lease
statements' (:mod:`django_bgtasks.db.sqlite.leases`).
"""

from __future__ import annotations

from django_bgtasks.db.shared import (
    CANCELLED_ERROR_CLASS,
    CLAIM_COLUMNS,
    ENQUEUE_COLUMNS,
    LOST_ERROR_CLASS,
    NOT_PAUSED,
    PAUSED_QUEUES,
    QUEUE_INDEX,
    QUEUE_RETRY,
    UNPAUSE_QUEUE,
    QueueStatements,
    distinct_values,
    queue_pick,
    queue_retry,
    ready_probe,
)
from django_bgtasks.db.sqlite.leases import AGE, NOW, after

# The queue's (Django Tasks).
_LIVE = f"{AGE} <= ttl"

# The backend's enqueue (db.shared.ENQUEUE_COLUMNS): the tasks of one Task, in
# one statement whatever their number, stored in the order of ``rows``. (The
# WHERE is SQLite's rule for an INSERT ... SELECT with an ON CONFLICT clause.)
_ENQUEUE = f"""
    INSERT INTO {{table}} ({ENQUEUE_COLUMNS})
    SELECT json_extract(value, '$.uuid'), %(task_path)s, %(backend)s, %(queue_name)s,
        %(priority)s, %(takes_context)s, json_extract(value, '$.args_kwargs'), %(run_after)s,
        '{{ready}}', 0, %(max_attempts)s, '[]', '[]', '', 0, %(ttl)s, 0, %(unique_key)s,
        %(active_key)s, %(trace_context)s,
        json_extract(value, '$.concurrency_key'), %(concurrency)s,
        json_extract(value, '$.rate_key'), %(rate_limit)s, %(rate_period)s,
        json_extract(value, '$.fairness_key'), json_extract(value, '$.fairness_weight')
    FROM json_each(%(rows)s) WHERE true
    ORDER BY key
    ON CONFLICT (active_key) DO NOTHING
    RETURNING uuid, enqueued_at
"""

# The flow limits (db/shared.py): one writer at a time, so the claim counts
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

# The ready rows a claim may take, as shared.queue_pick has them: of every
# queue, in the claim's order from its index (status, priority DESC, seq:
# migration 0018); of one named queue, from the ready rows' index led by the
# queue (status, queue_name, priority DESC, seq). ``INDEXED BY`` holds each
# to its index, whatever statistics ``ANALYZE`` (or ``PRAGMA optimize``)
# gathered. Each with the row's ``flow`` test, at most ``limit`` rows (also
# the idle poll's, without the flow test).
_DUE = f"""(run_after IS NULL OR julianday(run_after) <= julianday('now'))
            AND {NOT_PAUSED}"""


def _ready_rows(columns: str, flow: str, limit: str) -> str:
    """The pick (shared.queue_pick) of the ready rows' ``columns`` (and their
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


# --- Fair shares (db/postgresql/queue.py has the design; migration 0028) ---------------
# In a queue with keyed ready tasks, the keys of its highest priority where
# a keyed task can start compete (``keys``: a priority at a time from the
# highest, by a loose scan of 0028's index, ``''`` opening a priority and a
# NULL key closing it; ``found``, whether a key before this one of the
# priority has a task that can start, due and let by the flow limits,
# probed a key at a time until one has; a priority none of whose keys can
# start opens the next): each key's first ``limit`` due rows (read by an
# index descent of its own, ``seq IN (... LIMIT)``: SQLite has no LATERAL)
# start a turn apart (one over the row's weight) from the key's next turn,
# or from the queue's clock (the latest turn given) if that is later, so
# that a key back from idle banks no turns. The claim takes its rows by priority, then the tasks
# without a key (not held to the turns), then by virtual start, then the
# key whose last turn is oldest, then seq; migration 0028's trigger moves
# each started key's turn on. One writer at a time: no turn to lock, each
# claim sees the turns the one before it gave, and a lone key keeps its
# turns as any key does.
# A queue without keyed ready rows is read as before (``_claim_rows``), its
# ready rows in the claim's order, after one look into the keyed rows' index
# that finds none; in a queue with some, the rows without a key come from
# their own index, which the keyed backlog is not in. Which of the two
# scans runs is decided by its seek key (``queue_name = CASE WHEN <look>
# THEN <queue> END``: NULL, which finds nothing), computed once: SQLite
# tests a WHERE term with a subquery at each row, and a false one read the
# whole backlog. The keyed rows' candidates are CTEs of the statement
# (``_fair_shares``), of the queues named (``%(queues)s``) or of every queue
# with keyed ready rows (a loose scan of their index), not of each queue's
# pick: nested there, the statement overflowed SQLite's parser stack. Each
# key's (and each queue's) rows are looked up by their rowid, the keys (the
# queues) read first: ``CROSS JOIN`` holds SQLite to that order, and ``NOT
# INDEXED`` to the rowid. With statistics from ``ANALYZE`` it scanned the
# whole table instead, testing each row against the key's list: 1,000 steps
# a row (a CI run, after another test had analyzed the file).
_FAIR = "{{table}} {a} INDEXED BY bgtasks_queued_fair"
_UNKEYED = "{{table}} {a} INDEXED BY bgtasks_queued_unkeyed"


def _ready_keyed(a: str) -> str:
    """The keyed ready rows of the alias ``a`` (migration 0028's index's WHERE)."""
    return f"{a}.status = '{{ready}}' AND {a}.fairness_key IS NOT NULL"


def _ready_unkeyed(a: str) -> str:
    """The ready rows without a key of the alias ``a`` (migration 0028's index's WHERE)."""
    return f"{a}.status = '{{ready}}' AND {a}.fairness_key IS NULL"


def _key_startable(key: str, flow: str) -> str:
    """The keyed ready rows (``t``) of the key ``key.fkey``, of the queue
    ``key.queue`` at the priority ``key.priority``, that may start now: due,
    and passing ``flow``. The keys' scan asks whether a key has one; a key's
    candidates are the first of them."""
    return f"""{_ready_keyed("t")} AND t.queue_name = {key}.queue
                    AND t.priority = {key}.priority AND t.fairness_key = {key}.fkey
                    AND {_DUE} AND {flow}"""


def _keyed(queue: str) -> str:
    """Whether a keyed ready row of ``queue`` (a condition on ``k``) is
    there: one index entry's look."""
    return f"EXISTS (SELECT 1 FROM {_FAIR.format(a='k')} WHERE {_ready_keyed('k')} AND {queue})"


def _queue_names(cte: str, index: str, where: str, when: str) -> str:
    """The body of the recursive CTE ``cte(name)`` of the queue names the
    ``index`` of the ready rows ``where`` (on ``n``) holds, if ``when``: a
    loose scan, one descent a name (and a NULL)."""
    return f"""SELECT (SELECT min(n.queue_name) FROM {index.format(a="n")} WHERE {where})
            WHERE {when}
            UNION ALL
            SELECT (SELECT min(n.queue_name) FROM {index.format(a="n")}
                WHERE {where} AND n.queue_name > {cte}.name)
            FROM {cte} WHERE {cte}.name IS NOT NULL"""


# The claim's order, over the candidates' ``keyed``, ``vstart`` and
# ``last_turn`` (0, 0 and NULL for a row without a key, so among those rows
# the order of shared.queue_pick: priority DESC, seq).
_TURN_ORDER = "priority DESC, keyed, vstart, last_turn NULLS FIRST, seq"
_UNKEYED_COLUMNS = "0 AS keyed, 0.0 AS vstart, NULL AS last_turn"


def _fair_shares(columns: list[str], flow: str, limit: str) -> str:
    """The claim's CTEs: ``plain``, the queues with ready rows without a key
    (of every queue, while one has keyed ones), and ``fair_rows``, the keyed
    candidates, with their ``columns``, ``keyed``, ``vstart`` and
    ``last_turn``: the first ``limit`` rows that pass ``flow`` (on ``t``) of
    each key of its queue's highest priority where a keyed row can start."""
    picked = ", ".join(f"r.{column}" for column in columns)
    every = "%(all)s"
    # (``fair``: the queues named, each there once, as queue.manager sends
    # them, or those the scan found; a paused one left out.)
    return f"""plain(name) AS (
            {_queue_names("plain", _UNKEYED, _ready_unkeyed("n"), f"{every} AND {_keyed('1')}")}
        ), scanned(name) AS (
            {_queue_names("scanned", _FAIR, _ready_keyed("n"), every)}
        ), fair(name) AS (
            SELECT name FROM (
                SELECT name FROM scanned WHERE name IS NOT NULL
                UNION ALL
                SELECT value FROM json_each(%(queues)s) WHERE NOT {every}
            )
            WHERE {NOT_PAUSED.replace("queue_name", "name", 1)}
        ), tops(queue, priority) AS (
            SELECT fair.name, (
                SELECT k.priority FROM {_FAIR.format(a="k")}
                WHERE {_ready_keyed("k")} AND k.queue_name = fair.name
                ORDER BY k.priority DESC LIMIT 1)
            FROM fair
        ), keys(queue, priority, fkey, found) AS (
            SELECT tops.queue, tops.priority, '', 0 FROM tops WHERE tops.priority IS NOT NULL
            UNION ALL
            SELECT keys.queue,
                CASE WHEN keys.fkey IS NULL THEN (
                    SELECT k.priority FROM {_FAIR.format(a="k")}
                    WHERE {_ready_keyed("k")} AND k.queue_name = keys.queue
                        AND k.priority < keys.priority
                    ORDER BY k.priority DESC LIMIT 1)
                ELSE keys.priority END,
                CASE WHEN keys.fkey IS NULL THEN '' ELSE (
                    SELECT k.fairness_key FROM {_FAIR.format(a="k")}
                    WHERE {_ready_keyed("k")} AND k.queue_name = keys.queue
                        AND k.priority = keys.priority AND k.fairness_key > keys.fkey
                    ORDER BY k.fairness_key LIMIT 1) END,
                CASE WHEN keys.fkey IS NULL OR keys.fkey = '' THEN 0
                    WHEN keys.found THEN 1
                    ELSE EXISTS (SELECT 1 FROM {_FAIR.format(a="t")}
                        WHERE {_key_startable("keys", flow)}) END
            FROM keys WHERE keys.priority IS NOT NULL AND (keys.fkey IS NOT NULL OR NOT keys.found)
        ), turns AS (
            SELECT queue, priority, fkey, last_turn, max(COALESCE(vtime, clock), clock) AS v0
            FROM (
                SELECT keys.queue, keys.priority, keys.fkey, s.vtime, s.started_at AS last_turn,
                    (SELECT COALESCE(max(c.turn), 0)
                        FROM {{shares}} c INDEXED BY bgtasks_fair_share_turn
                        WHERE c.queue_name = keys.queue) AS clock
                FROM keys LEFT JOIN {{shares}} s
                    ON s.queue_name = keys.queue AND s.fairness_key = keys.fkey
                WHERE keys.fkey <> '' AND keys.priority = (
                    SELECT min(l.priority) FROM keys l WHERE l.queue = keys.queue AND l.fkey <> '')
            )
        ), fair_rows AS (
            SELECT r.seq, r.priority, {picked}, 1 AS keyed,
                turns.v0 + (row_number() OVER (
                    PARTITION BY turns.queue, turns.fkey ORDER BY r.seq
                ) - 1) * 1.0 / COALESCE(r.fairness_weight, 1) AS vstart,
                turns.last_turn
            FROM turns CROSS JOIN {{table}} r NOT INDEXED ON r.seq IN (
                SELECT t.seq FROM {_FAIR.format(a="t")}
                WHERE {_key_startable("turns", flow)}
                ORDER BY t.seq LIMIT {limit})
        )"""


def _claim_rows(columns: list[str], flow: str, limit: str) -> str:
    """The claim's pick (shared.queue_pick) of the ready rows without a key
    in the claim's order, as :func:`_ready_rows` has them while no queue
    has a keyed ready row (of one queue: while that queue has none); else
    from their own index (of every queue, those of each of ``plain``'s
    queues); with the ``_UNKEYED_COLUMNS``."""
    listed = ", ".join(columns)
    picked = ", ".join(f"r.{column}" for column in columns)
    queue = f"json_extract(%(queues)s, '$[{QUEUE_INDEX}]')"
    keyed = _keyed(f"k.queue_name = {queue}")
    return queue_pick(
        f"""SELECT * FROM (
                SELECT seq, priority, {listed}, {_UNKEYED_COLUMNS}
                FROM {{table}} t INDEXED BY bgtasks_queued_claim
                WHERE status = CASE WHEN NOT {_keyed("1")} THEN '{{ready}}' END
                    AND {_DUE} AND {flow}
                ORDER BY priority DESC, seq LIMIT {limit})
            UNION ALL
            SELECT * FROM (
                SELECT r.seq, r.priority, {picked}, {_UNKEYED_COLUMNS}
                FROM plain CROSS JOIN {{table}} r NOT INDEXED ON r.seq IN (
                    SELECT t.seq FROM {_UNKEYED.format(a="t")}
                    WHERE {_ready_unkeyed("t")} AND t.queue_name = plain.name
                        AND {_DUE} AND {flow}
                    ORDER BY t.priority DESC, t.seq LIMIT {limit})
                WHERE plain.name IS NOT NULL
                ORDER BY r.priority DESC, r.seq LIMIT {limit})""",
        f"""SELECT * FROM (
                SELECT seq, priority, {listed}, {_UNKEYED_COLUMNS}
                FROM {{table}} t INDEXED BY bgtasks_queued_ready
                WHERE status = '{{ready}}' AND queue_name = CASE WHEN NOT {keyed} THEN {queue} END
                    AND {_DUE} AND {flow}
                ORDER BY priority DESC, seq LIMIT {limit})
            UNION ALL
            SELECT * FROM (
                SELECT seq, priority, {listed}, {_UNKEYED_COLUMNS}
                FROM {_UNKEYED.format(a="t")}
                WHERE {_ready_unkeyed("t")} AND queue_name = CASE WHEN {keyed} THEN {queue} END
                    AND {_DUE} AND {flow}
                ORDER BY priority DESC, seq LIMIT {limit})""",
        limit,
    )


# The rows of a bulk action's batch: the JSON array ``seqs``.
_LISTED = "seq IN (SELECT value FROM json_each(%(seqs)s))"


def _cancel(rows: str, returning: str) -> str:
    """An operator's cancel of the rows the condition ``rows`` names, as
    postgresql/queue.py's."""
    return f"""
        UPDATE {{table}} SET cancel_requested = 1,
            status = CASE WHEN status = '{{ready}}' THEN '{{failed}}' ELSE status END,
            active_key = CASE WHEN status = '{{ready}}' THEN NULL ELSE active_key END,
            finished_at = CASE WHEN status = '{{ready}}' THEN {NOW} ELSE finished_at END,
            errors = CASE WHEN status = '{{ready}}' THEN json_insert(errors, '$[#]', json_object(
                'exception_class_path', '{CANCELLED_ERROR_CLASS}',
                'traceback', 'TaskCancelled: cancelled by an operator before it started'))
                ELSE errors END
        WHERE {rows} AND status IN ('{{ready}}', '{{running}}')
        RETURNING {returning}
    """


# The columns of the claim's candidates, and the flow limits' test of each
# (a free slot of each of its keys).
_CLAIM_COLUMNS = ["concurrency_key", "concurrency", "rate_key", "rate_limit", "rate_period"]
_CLAIM_FLOW = (
    f"(t.concurrency_key IS NULL OR {_C_FREE_SLOTS} > 0)"
    f" AND (t.rate_key IS NULL OR {_R_FREE_SLOTS} > 0)"
)

QUEUE = QueueStatements(
    claim=f"""
        WITH RECURSIVE {_fair_shares(_CLAIM_COLUMNS, _CLAIM_FLOW, "%(limit)s")}, cand AS (
            SELECT * FROM ({_claim_rows(_CLAIM_COLUMNS, _CLAIM_FLOW, "%(limit)s")})
            UNION ALL
            SELECT * FROM fair_rows
        ), chosen AS (
            SELECT seq, priority, concurrency_key, rate_key, keyed, vstart, last_turn,
                CASE WHEN concurrency_key IS NOT NULL THEN {_C_FREE_SLOTS} END AS cfree,
                CASE WHEN rate_key IS NOT NULL THEN {_R_FREE_SLOTS} END AS rfree
            FROM cand t
            ORDER BY {_TURN_ORDER}
            LIMIT %(limit)s
        )
        UPDATE {{table}} SET status = '{{running}}', owner = %(owner)s, token = token + 1,
            updated_at = {NOW}, cancel_requested = 0,
            started_at = COALESCE(started_at, {NOW}), last_attempted_at = {NOW},
            attempts = attempts + 1, worker_ids = json_insert(worker_ids, '$[#]', %(owner)s)
        WHERE seq IN (
            SELECT seq FROM (
                SELECT seq, rate_key, rfree,
                    row_number() OVER (PARTITION BY rate_key ORDER BY {_TURN_ORDER}) AS rrank
                FROM (
                    SELECT seq, priority, concurrency_key, rate_key, keyed, vstart, last_turn,
                        cfree, rfree,
                        row_number() OVER (PARTITION BY concurrency_key ORDER BY {_TURN_ORDER})
                            AS crank
                    FROM chosen
                )
                WHERE concurrency_key IS NULL OR crank <= cfree
            )
            WHERE rate_key IS NULL OR rrank <= rfree
        )
        RETURNING {CLAIM_COLUMNS}
    """,
    renew=f"""
        UPDATE {{table}} SET updated_at = {NOW},
            progress = CASE WHEN %(set_progress)s THEN %(progress)s ELSE progress END
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = '{{running}}' AND {_LIVE}
        RETURNING cancel_requested
    """,
    finish=f"""
        UPDATE {{table}} SET status = %(status)s, updated_at = {NOW},
            finished_at = CASE WHEN %(status)s = '{{ready}}' THEN NULL ELSE {NOW} END,
            return_value = %(return_value)s,
            errors = CASE WHEN %(error)s IS NULL THEN errors
                ELSE json_insert(errors, '$[#]', json(%(error)s)) END,
            attempts = attempts - %(refund)s,
            active_key = CASE WHEN %(status)s = '{{ready}}' THEN active_key END,
            run_after = CASE WHEN %(delay)s > 0 THEN {after("%(delay)s")} ELSE run_after END
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = '{{running}}' AND {_LIVE}
        RETURNING status, finished_at
    """,
    # As ``finish``, for every ending in the JSON array ``ends`` at once: each
    # row fenced alike (its seq, owner, token, RUNNING and a live lease).
    finish_many=f"""
        UPDATE {{table}} SET status = e.status, updated_at = {NOW},
            finished_at = CASE WHEN e.status = '{{ready}}' THEN NULL ELSE {NOW} END,
            return_value = e.return_value,
            errors = CASE WHEN e.error IS NULL THEN errors
                ELSE json_insert(errors, '$[#]', json(e.error)) END,
            attempts = attempts - e.refund,
            active_key = CASE WHEN e.status = '{{ready}}' THEN active_key END,
            run_after = CASE WHEN e.delay > 0 THEN {after("e.delay")} ELSE run_after END
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
            finished_at = CASE WHEN attempts < max_attempts THEN NULL ELSE {NOW} END,
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
        UPDATE {{table}} SET status = '{{ready}}', updated_at = {NOW},
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
        INSERT INTO {{paused}} (queue_name, paused_at) VALUES (%(queue)s, {NOW})
        ON CONFLICT (queue_name) DO NOTHING
        RETURNING 1 AS matched
    """,
    unpause_queue=UNPAUSE_QUEUE + " RETURNING 1 AS matched",
    paused_queues=PAUSED_QUEUES,
    # (The operator's reads alike on every vendor: shared.distinct_values.)
    queue_names=distinct_values("queue_name"),
    task_paths=distinct_values("task_path"),
    any_ready=ready_probe(_ready_rows("1 AS due", "1", "1")),
)
