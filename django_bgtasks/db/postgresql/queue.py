"""PostgreSQL's statements of the queue (Django Tasks): enqueue, the claim with
its flow limits and paused queues, renew, finish, the ends of several runs
with the next claim in one statement, give back, recover, cancel and retry
(the rules: :mod:`django_bgtasks.db.shared`). Apart from the lease statements
of :mod:`django_bgtasks.db.postgresql.leases` only for their size; the same
conventions hold: the clock is ``clock_timestamp()``, and repeated
parameters are cast.
"""

from __future__ import annotations

from django_bgtasks.db.shared import (
    # (alike mysql_queue.py's list on purpose: the statements both take from rules)
    CANCELLED_ERROR_CLASS,
    CLAIM_COLUMNS,
    ENQUEUE_COLUMNS,
    LOST_ERROR_CLASS,
    PAUSED_QUEUES,
    QUEUE_RETRY,
    UNPAUSE_QUEUE,
    QueueStatements,
    distinct_values,
    flow_slots_free,
    queue_retry,
)
from django_bgtasks.validation import validate_limit

# The queue's (Django Tasks).
# The backend's enqueue (db.shared.ENQUEUE_COLUMNS): the tasks of one Task, in
# one statement whatever their number, stored in the order of ``rows``. ON
# CONFLICT names the predicate of a unique index of the rows that have a key
# (``active_key IS NOT NULL``), which the plain unique constraint meets too:
# a release to come can replace the constraint by such an index (whose
# other rows, most of them, would write no entry to it) while this one runs.
_ENQUEUE = f"""
    INSERT INTO {{table}} ({ENQUEUE_COLUMNS})
    SELECT (r.item ->> 'uuid')::uuid, %(task_path)s::text, %(backend)s::text,
        %(queue_name)s::text, %(priority)s::integer, %(takes_context)s::boolean,
        r.item -> 'args_kwargs', %(run_after)s::timestamptz, '{{ready}}', 0,
        %(max_attempts)s::integer, '[]'::jsonb, '[]'::jsonb, '', 0, %(ttl)s::float8, false,
        %(unique_key)s::text, %(active_key)s::text, %(trace_context)s::text,
        r.item ->> 'concurrency_key', %(concurrency)s::integer, r.item ->> 'rate_key',
        %(rate_limit)s::integer, %(rate_period)s::float8, r.item ->> 'fairness_key',
        (r.item ->> 'fairness_weight')::integer
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS r(item, n)
    ORDER BY r.n
    ON CONFLICT (active_key) WHERE active_key IS NOT NULL DO NOTHING
    RETURNING replace(uuid::text, '-', '') AS uuid,
        to_char(enqueued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') AS enqueued_at
"""

# The claim (db/shared.py says how the flow limits are kept): ``cand`` locks
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
# Whether the concurrency key of ``t`` has a free slot, asked as "is the
# first of its slots, free ones (``seq`` NULL) first, free?": one entry of
# the slots' index on their holder (kind, flow_key, seq), read backwards
# (it is NULLS LAST). Asked as EXISTS (... AND seq IS NULL), as MySQL's is,
# the planner may scan the whole slot table for each candidate, as if free
# slots were spread evenly through it when a key's slots lie together: a
# claim of 8 tasks read 2,700 pages of a table of 110,000 slots (10 keys of
# 10,000). With ORDER BY ... LIMIT 1 the index's order is the only cheap plan.
_T_CONCURRENCY_FREE = """EXISTS (
                    SELECT 1 FROM (
                        SELECT s.seq FROM {slots} s
                        WHERE s.kind = '{concurrency}' AND s.flow_key = t.concurrency_key
                            AND s.slot <= t.concurrency
                        ORDER BY s.seq DESC NULLS FIRST LIMIT 1
                    ) s
                    WHERE s.seq IS NULL)"""


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


# The claim's LIMIT is written into its text (:func:`with_limit`), not sent
# as a parameter. PostgreSQL plans a prepared statement afresh at each run
# (a custom plan) unless its generic plan, made once, costs no more; with
# ``LIMIT $1`` a generic plan assumes a tenth of the table, so every claim
# was planned again, and planning this statement took half the server's CPU
# in a drain. With the limit in the text, a statement for each limit (a
# worker's claims take at most its thread count) is planned once per
# connection (docs/benchmarks.md, "A claim planned once").
LIMIT_MARK = "_bgtasks_claim_limit_"


def with_limit(query: str, limit: object) -> str:
    """``query`` (a claim, or a run's ends and a claim) with ``limit`` as its
    LIMIT: a whole number, checked (a claim's ``limit`` parameter)."""
    return query.replace(LIMIT_MARK, str(validate_limit(limit)))


# The claim reads each of its queues apart, from the ready rows' index
# (``bgtasks_queued_ready``: queue name, priority DESC, seq; READY rows only,
# migration 0017), where an equality on the queue gives the claim's order:
# each queue's scan stops at the claim's limit, and the first ``limit`` rows
# of those few, in the claim's order, are the claim's candidates. So a claim
# reads O(limit) index entries a queue, whatever the table's size and
# whatever the planner's statistics say of it: no plan that sorts the ready
# rows of several queues, or of one queue through an index in another
# order, is left to choose (with stale statistics, PostgreSQL 15 chose to
# sort all 292,383 ready rows of one queue to return 8; docs/benchmarks.md,
# "A million tasks"). The queues are ``%(queues)s``, or with ``%(all)s``
# every queue that has a ready row, found by a loose scan of that index (one
# descent a queue name); paused ones are left out before their rows are read.
# (``WITH RECURSIVE`` for that scan: it is allowed beside the other CTEs.)
#
# The queues served are gathered into one array and read back with
# ``unnest``, which the planner counts as 10 queues, whatever the
# parameters and whatever the statistics say. It counted the recursive scan
# as about 55 queues, and a custom plan folded the parameters (``%(all)s``
# drops a branch, the length of ``%(queues)s`` sets its rows): so the
# generic plan cost more than the custom ones, the plan cache dropped it,
# and the claim was planned again at each call (1.4 ms a plan for 1 ms of
# work: a drain of a stale backlog at 0.67x). And with a LATERAL scan of
# about 2,000 a queue without statistics, the claim was estimated at
# 100,000-110,000, over ``jit_above_cost`` (100,000 by default), where
# PostgreSQL compiles a statement with its JIT at every call (122 ms, for
# one that runs in 1-2 ms: a drain at 0.05x behind 10,000,000 finished
# tasks). Now about 21,000, the generic plan within 1 of the custom ones.
# (Reading the parameters through scalar subqueries too, so that no custom
# plan folds them, cost a tenth of a four-worker drain.) docs/benchmarks.md,
# "A million tasks", has the figures.
_QUEUES = """ready_queues(name) AS (
            (SELECT queue_name FROM {table}
            WHERE %(all)s::boolean AND status = '{ready}'
            ORDER BY queue_name LIMIT 1)
            UNION ALL
            SELECT (SELECT t.queue_name FROM {table} t
                WHERE t.status = '{ready}' AND t.queue_name > r.name
                ORDER BY t.queue_name LIMIT 1)
            FROM ready_queues r WHERE r.name IS NOT NULL
        ), queues AS (
            SELECT name FROM ready_queues WHERE name IS NOT NULL
            UNION ALL
            SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
            WHERE NOT %(all)s::boolean
        ), served AS (
            SELECT q.name FROM unnest((
                SELECT array_agg(name) FROM queues
                WHERE name NOT IN (SELECT paused.queue_name FROM {paused} paused)
            )) AS q(name)
        )"""
# The rows of the queue ``q.name`` a claim may take, but for the flow limits
# (also the idle poll's).
_CLAIMABLE = """t.status = '{ready}' AND t.queue_name = q.name
                    AND (t.run_after IS NULL OR t.run_after <= clock_timestamp())"""
# The claim's CTEs (its ``LIMIT``, queues and owner are parameters) and its
# UPDATE, apart: ``finish_claim`` puts them after the ends' UPDATE. The
# rows' start and their rate slots' are one read of the clock (``claimed_at``,
# a CTE with a volatile call, so evaluated once, when ``took`` or the UPDATE
# first asks: after the slots' reads, which the window functions of
# ``_paired`` finish first). Each clock_timestamp() call reads the clock
# again, and a backend paused between two would record a run's start after
# the time its rate slot took; read before the slots were, a start before the
# end of the run whose concurrency slot it took. Each queue's scan locks the
# rows it returns (up to ``limit`` a queue); those the claim leaves (beyond
# its ``limit``, in a later queue's order) are unlocked at its commit, its
# own statement's end.
# Fair shares (docs/django-tasks.md, "Fair shares"): in each served queue,
# the keys with ready tasks at the highest priority where a keyed task can
# start (``keys``: a loose scan of migration 0028's index, one descent a
# key, a priority at a time from the highest; ``found``, whether a key of
# the priority so far has a task that can start, due and let by the flow
# limits, probed a key at a time until one has, so one probe where every key
# can start; a priority none of whose keys can start sends the scan on to
# the next, and the keys of the last priority read are ``seen``: keyed tasks
# for tomorrow, or held by a limit, had held every lower keyed task back),
# and their turns (``seen``, FairShare: the virtual time of a key's next turn).
# ``keyed``, the served queues with keys, is asked of ``served`` (a
# semi-join), not read off ``keys``: the planner counts it then as no more
# than the served queues (10), where from the keys' scan it counted 200,
# each a scan of its tasks without a key, and estimated the claim at
# 135,000-418,000 at 10,000,000 rows, over jit_above_cost: JIT-compiled at
# every claim, 300-400 ms (docs/benchmarks.md, "Fair shares at ten million
# rows"; tests/db/postgresql/test_queue.py).
# Where two keys or more compete, the claim locks every one's row, in id
# order, waiting for a claim that holds them (``locked``): a lock waited for
# returns the row's newest version, while the rest of the statement reads
# its snapshot, so the turns (``shares``, ``turns``) are ordered by what the
# claims before it wrote. Taken so, the turns are exact under any number of
# claimers: skipping the rows other claims held (SKIP LOCKED) instead let a
# claim give a key a second turn while a key another claim held waited, and
# sent the claims that found every key held away empty, to wait for their
# next poll (four workers drained three keys at 0.41x of tasks without a
# key; 0.69x waiting). The price: claims of a queue whose keys compete take
# their turns one after another. A lone key locks nothing and keeps no turns.
# ``clocks``: a queue's latest turn, where a key new or back from idle starts
# (it can't bank the turns it missed). Each key's candidates are its first
# ready rows, each a turn (1 / its weight) after the one before, from its
# next turn; those of the first ``limit`` keys in turn order that have a
# task to start (``turns``): a key whose next tasks wait for a retry's delay
# or a flow limit takes no turn, and holds none back (it had held every
# claim of one task empty until its tasks could start). The keys are asked
# in turn order, one probe each, under the LIMIT, so the probes stop at the
# ``limit``-th key that has one; the planner costs them so too (a fraction
# of the keys it expects). Asked of every key (an EXISTS in the WHERE), they
# put the generic plan's estimate over jit_above_cost
# (tests/db/postgresql/test_queue.py).
# A ready task's fairness key (NULL unless it is ready), and whether it is a
# ready task without one (true, or NULL): the expressions of migration
# 0028's two indexes (db/postgresql/schema.py), to the letter once rendered.
READY_KEY = "(CASE WHEN status = '{ready}' THEN fairness_key END)"
READY_UNKEYED = "(CASE WHEN status = '{ready}' AND fairness_key IS NULL THEN true END)"
_T_KEY = READY_KEY.replace("status", "t.status").replace("fairness_key", "t.fairness_key")
_N_KEY = READY_KEY.replace("status", "n.status").replace("fairness_key", "n.fairness_key")
_READY_UNKEYED = READY_UNKEYED.replace("status", "t.status").replace(
    "fairness_key", "t.fairness_key"
)


def _key_startable(key: str) -> str:
    """The ready rows (``t``) of the key ``key.fkey``, of the queue
    ``key.queue`` at the priority ``key.priority``, that may start now: due,
    and let by the flow limits. The keys' scan asks whether a key has one,
    the turns too; a key's candidates are the first of them."""
    return f"""t.queue_name = {key}.queue AND t.priority = {key}.priority
                        AND {_T_KEY} = {key}.fkey
                        AND (t.run_after IS NULL OR t.run_after <= clock_timestamp())
                        AND {flow_slots_free(_T_CONCURRENCY_FREE, _T_RATE_FREE)}"""


_KEY_STARTABLE = _key_startable("s")
# Whether the key ``k`` of the keys' scan has a task that can start.
_K_STARTABLE = f"EXISTS (SELECT 1 FROM {{table}} t WHERE {_key_startable('k')})"
_FAIR_SHARES = (
    f"""keys(queue, priority, fkey, found) AS (
            SELECT q.name, k.priority, k.fkey, {_K_STARTABLE}
            FROM served q CROSS JOIN LATERAL (
                SELECT q.name AS queue, t.priority, {_T_KEY} AS fkey FROM {{table}} t
                WHERE t.queue_name = q.name AND {_T_KEY} IS NOT NULL
                ORDER BY t.priority DESC, {_T_KEY} LIMIT 1
            ) k
            UNION ALL
            SELECT k.queue, k.priority, k.fkey,
                CASE WHEN k.priority = keys.priority AND keys.found THEN true
                    ELSE {_K_STARTABLE} END
            FROM keys CROSS JOIN LATERAL (
                (SELECT keys.queue, n.priority, {_N_KEY} AS fkey FROM {{table}} n
                WHERE n.queue_name = keys.queue AND n.priority = keys.priority
                    AND {_N_KEY} > keys.fkey
                ORDER BY {_N_KEY} LIMIT 1)
                UNION ALL
                (SELECT keys.queue, n.priority, {_N_KEY} FROM {{table}} n
                WHERE NOT keys.found AND n.queue_name = keys.queue
                    AND n.priority < keys.priority AND {_N_KEY} IS NOT NULL
                ORDER BY n.priority DESC, {_N_KEY} LIMIT 1)
                LIMIT 1
            ) k
        ), keyed AS MATERIALIZED (
            SELECT DISTINCT q.name FROM served q
            WHERE EXISTS (SELECT 1 FROM keys WHERE keys.queue = q.name)
        ), clocks AS MATERIALIZED (
            SELECT q.name AS queue, COALESCE((
                SELECT max(s.turn) FROM {{shares}} s WHERE s.queue_name = q.name), 0) AS v
            FROM keyed q
        ), seen AS MATERIALIZED (
            SELECT k.queue, k.priority, k.fkey, s.id, s.vtime, s.started_at, c.v AS clock,
                count(*) OVER (PARTITION BY k.queue) AS rivals
            FROM (
                SELECT keys.*, min(keys.priority) OVER (PARTITION BY keys.queue) AS level
                FROM keys
            ) k JOIN clocks c ON c.queue = k.queue
            LEFT JOIN {{shares}} s ON s.queue_name = k.queue AND s.fairness_key = k.fkey
            WHERE k.priority = k.level
        ), locked AS MATERIALIZED (
            SELECT s.id, s.vtime, s.started_at FROM {{shares}} s
            WHERE s.id IN (SELECT id FROM seen WHERE rivals > 1)
            ORDER BY s.id
            FOR UPDATE
        ), shares AS MATERIALIZED (
            SELECT seen.queue, seen.priority, seen.fkey, seen.id, seen.clock, seen.rivals,
                COALESCE(l.vtime, seen.vtime) AS vtime,
                COALESCE(l.started_at, seen.started_at) AS started_at
            FROM seen LEFT JOIN locked l ON l.id = seen.id
        ), turns AS MATERIALIZED (
            SELECT t.id FROM keyed q CROSS JOIN LATERAL (
                SELECT s.id FROM (
                    SELECT s.* FROM shares s
                    WHERE s.queue = q.name AND s.rivals > 1
                    ORDER BY GREATEST(COALESCE(s.vtime, s.clock), s.clock),
                        s.started_at NULLS FIRST, s.id
                    OFFSET 0
                ) s CROSS JOIN LATERAL (
                    SELECT 1 FROM {{table}} t
                    WHERE {_KEY_STARTABLE}
                    LIMIT 1
                ) startable
                LIMIT """
    + LIMIT_MARK
    + """
            ) t
        )"""
)


# What a claim reads of a candidate row (``t``).
_CANDIDATE = """t.seq, t.token, t.priority, t.concurrency_key, t.concurrency,
                        t.rate_key, t.rate_limit, t.rate_period, t.fairness_weight"""


def _first_startable(queues: str, ready: str, columns: str = _CANDIDATE) -> str:
    """Of the queues (``q``) of the CTE ``queues``, the rows ``ready`` says,
    each queue's first ``limit`` in the claim's order that the flow limits
    let start, locked (``p``, with ``columns``)."""
    return f"""FROM {queues} q CROSS JOIN LATERAL (
                    SELECT {columns}
                    FROM {{table}} t
                    WHERE {ready}
                        AND {flow_slots_free(_T_CONCURRENCY_FREE, _T_RATE_FREE)}
                    ORDER BY t.priority DESC, t.seq
                    LIMIT {LIMIT_MARK}
                    FOR UPDATE SKIP LOCKED
                ) p"""


# The ready tasks in a claim's order that the turns don't hold: of the
# queues of the CTE ``queues``, those ``ready`` says (_first_startable).
def _unkeyed(queues: str, ready: str) -> str:
    return f"""SELECT p.*, NULL::text AS fqueue, NULL::text AS fkey, 0::float8 AS vstart,
                    NULL::timestamptz AS last_turn, NULL::float8 AS floor
                {_first_startable(queues, ready)}"""


# In a queue with keyed ready tasks, those without a key (migration 0028's
# index of them: the ready rows' index would read past the keyed ones).
_KEYED_QUEUE_UNKEYED = f"""t.queue_name = q.name AND {_READY_UNKEYED}
                        AND (t.run_after IS NULL OR t.run_after <= clock_timestamp())"""
# The flow limits' part of a claim (db/shared.py): the slots the candidates
# (``cand``) take, and those that get every slot they need (``claimed``).
# A key's free concurrency slots are taken in no order (``_paired`` ranks
# those taken by slot): asked ``ORDER BY s.slot``, with the statistics of
# an empty slot table, the planner read every slot of the key through
# another of its indexes and sorted them, whichever indexes it had (the
# sort of "one row" costing nothing): 10,000 slots a key, 3-8 ms a key a
# claim (tests/queue/test_claim_reads.py, the "limits" kind). Where a key's
# tasks declare different limits, a task of the lower limit may so get no
# slot within it at one claim while one is free, and wait for a later
# claim; the limits hold either way.
_SLOT_CTES = f"""cfree AS (
            SELECT f.* FROM (
                SELECT concurrency_key AS key, count(*) AS wanted, max(concurrency) AS most
                FROM cand WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key
            ) w CROSS JOIN LATERAL (
                SELECT s.id, s.flow_key, s.slot FROM {{slots}} s
                WHERE s.kind = '{{concurrency}}' AND s.flow_key = w.key AND s.slot <= w.most
                    AND s.seq IS NULL
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
                started_at = CASE WHEN s.id = c.rslot THEN (SELECT at FROM claimed_at)
                    ELSE s.started_at END
            FROM claimed c
            WHERE s.id = c.cslot OR s.id = c.rslot
        )"""
# Every claim's first CTEs: its one read of the clock, and the queues it serves.
_CLAIM_START = f"""
        claimed_at AS (
            SELECT clock_timestamp() AS at
        ), {_QUEUES}"""
_CLAIM_CTES = f"""{_CLAIM_START}, {_FAIR_SHARES}, cand AS (
            SELECT c.* FROM (
                {_unkeyed("served", _CLAIMABLE)}
                WHERE q.name NOT IN (SELECT name FROM keyed)
                UNION ALL
                {_unkeyed("keyed", _KEYED_QUEUE_UNKEYED)}
                UNION ALL
                SELECT f.*, s.queue AS fqueue, CASE WHEN s.rivals > 1 THEN s.fkey END AS fkey,
                    GREATEST(COALESCE(s.vtime, s.clock), s.clock)
                        + (row_number() OVER (PARTITION BY s.queue, s.fkey ORDER BY f.seq) - 1)
                        ::float8 / COALESCE(f.fairness_weight, 1) AS vstart,
                    s.started_at AS last_turn, s.clock AS floor
                FROM shares s CROSS JOIN LATERAL (
                    SELECT {_CANDIDATE}
                    FROM {{table}} t
                    WHERE {_KEY_STARTABLE}
                    ORDER BY t.priority DESC, {_T_KEY}, t.seq
                    LIMIT {LIMIT_MARK}
                    FOR UPDATE SKIP LOCKED
                ) f
                WHERE s.id IS NULL OR s.rivals = 1 OR s.id IN (SELECT id FROM turns)
            ) c
            ORDER BY c.priority DESC, c.fqueue IS NOT NULL, c.vstart, c.last_turn NULLS FIRST,
                c.seq
            LIMIT {LIMIT_MARK}
        ), {_SLOT_CTES}, starts AS (
            SELECT fqueue, fkey, max(floor) AS floor,
                count(*)::float8 / max(COALESCE(fairness_weight, 1)) AS strides
            FROM claimed WHERE fkey IS NOT NULL GROUP BY fqueue, fkey
        ), bumped AS (
            UPDATE {{shares}} s
            SET vtime = GREATEST(COALESCE(s.vtime, b.floor), b.floor) + b.strides,
                turn = GREATEST(COALESCE(s.vtime, b.floor), b.floor),
                started_at = (SELECT at FROM claimed_at)
            FROM starts b
            WHERE s.queue_name = b.fqueue AND s.fairness_key = b.fkey
        ), made AS (
            INSERT INTO {{shares}} (queue_name, fairness_key, vtime, turn, started_at)
            SELECT b.fqueue, b.fkey, b.floor + b.strides, b.floor, (SELECT at FROM claimed_at)
            FROM starts b
            ON CONFLICT (queue_name, fairness_key) DO NOTHING
        )"""


# The plain claims: the claim without the turns' CTEs, for queues whose
# ready tasks have no fairness key (``plain``), or one queue's lone key
# (``lone``). Their plans read what the full claim's does, but the statement
# is half its size, and PostgreSQL's work to start and end a plan grows with
# that: the full claim took 0.15-0.25 ms more (an idle worker's start 1.14x
# as late as before fair shares, docs/benchmarks.md, "Fair shares"); the
# lone key's probes, 0.1 ms, so the plain claim has none. A worker sends the
# claim its last claim of those queues named (``next_claim``;
# queue/manager.py), a guess that can be stale, so each is exact whatever
# the guess. Their candidates (``picked``) are in the full claim's order:
# by priority, tasks without a key first, then by seq. Each takes those
# before the first keyed one it must leave to a fuller claim (``held``),
# which the full claim would take first too, and names that claim next, so
# that the worker sends it. The plain claim leaves every keyed task; the
# lone one those but of a lone key (``lone``): the first keyed candidate's
# key, where that is its queue's one key at the candidate's priority, and
# its queue has no ready task without a key. (A keyed task of a higher
# priority that could start would be a candidate before it; the full claim
# reads keys at the highest priority where one can.) The full claim takes
# such a key's tasks in seq order, after the tasks without a key of its
# priority, and keeps no turns for it; of one queue only, since it orders
# two queues' lone keys by their turns. Three index descents, for one queue
# at most.
def _first_exists(where: str, order: str) -> str:
    """Whether a row of the tasks (``t``) is as ``where`` says, asked as "the
    first such row in ``order``" (an index's order), one descent. Asked as a
    plain EXISTS, a planner whose statistics are stale may make it a join
    over a scan of the whole table: an anti-join of 28,367 pages, 918 ms, a
    claim of a lone key's 200,000 tasks, with the statistics of an empty
    table (docs/benchmarks.md, "Three claims"); hash joins over two
    sequential scans of 20,000 rows, with those of a tenth of them
    (tests/queue/test_claim_reads.py). A subquery with a LIMIT stays a
    subplan, run per row with the outer row's values in its index's bounds."""
    return f"""EXISTS (
                    SELECT 1 FROM (
                        SELECT t.seq FROM {{table}} t
                        WHERE {where}
                        ORDER BY {order} LIMIT 1
                    ) first)"""


def _has_unkeyed(queue: str) -> str:
    """Whether the queue ``queue`` (an expression) has a ready task without a
    key: then its one key is no lone key (0028's index of them)."""
    return _first_exists(f"t.queue_name = {queue} AND {_READY_UNKEYED}", "t.priority DESC, t.seq")


def _has_key(queue: str, priority: str = "", key: str = "") -> str:
    """Whether the queue ``queue`` has a ready keyed task; with ``priority``,
    of that priority, and with ``key`` (a comparison and an expression, such
    as ``< f.fairness_key``), of a key so placed (0028's index of them)."""
    where = f"t.queue_name = {queue}"
    where += f" AND t.priority = {priority}" if priority else ""
    where += f" AND {_T_KEY} {key}" if key else f" AND {_T_KEY} IS NOT NULL"
    return _first_exists(where, f"t.priority DESC, {_T_KEY}")


_PLAIN_CANDIDATE = _CANDIDATE + ", t.queue_name, t.fairness_key"
_LONE = f"""lone AS (
            SELECT f.queue_name, f.fairness_key, f.priority FROM (
                SELECT * FROM picked WHERE fairness_key IS NOT NULL ORDER BY n LIMIT 1
            ) f
            WHERE NOT {_has_key("f.queue_name", "f.priority", "< f.fairness_key")}
                AND NOT {_has_key("f.queue_name", "f.priority", "> f.fairness_key")}
                AND NOT {_has_unkeyed("f.queue_name")}
        ), """
_NOT_LONE = """ AND NOT EXISTS (
                SELECT 1 FROM lone l WHERE l.queue_name = k.queue_name
                    AND l.fairness_key = k.fairness_key AND l.priority = k.priority)"""


def _plain_claim_ctes(*, lone: bool) -> str:
    """The CTEs of the plain claim, or with ``lone`` of the lone key's."""
    return f"""{_CLAIM_START}, picked AS (
            SELECT c.*, row_number() OVER (
                ORDER BY c.priority DESC, c.fairness_key IS NOT NULL, c.seq) AS n
            FROM (
                SELECT p.* {_first_startable("served", _CLAIMABLE, _PLAIN_CANDIDATE)}
                ORDER BY p.priority DESC, p.fairness_key IS NOT NULL, p.seq
                LIMIT {LIMIT_MARK}
            ) c
        ), {_LONE if lone else ""}held AS (
            SELECT k.n FROM picked k
            WHERE k.fairness_key IS NOT NULL{_NOT_LONE if lone else ""}
        ), cand AS (
            SELECT c.* FROM picked c WHERE c.n < ALL (SELECT n FROM held)
        ), {_SLOT_CTES}"""


# The claim's ``next_claim`` column: the claim the worker sends next. The
# full claim names the plain one where the queues have no keyed task, the
# lone key's where one queue's lone key is all (a queue with one key at the
# priority it reads keys at, and no task without a key), else itself. The
# plain claim names the lone key's when it left a keyed task; the lone
# key's, the full one when it left one, the plain one where the queues have
# no keyed task (a descent a queue).
_FULL_NEXT = f"""CASE WHEN NOT EXISTS (SELECT 1 FROM keyed) THEN 'plain'
            WHEN (SELECT count(*) FROM seen) > 1
                OR EXISTS (SELECT 1 FROM keyed q WHERE {_has_unkeyed("q.name")})
            THEN 'full' ELSE 'lone' END"""
_PLAIN_NEXT = "CASE WHEN EXISTS (SELECT 1 FROM held) THEN 'lone' ELSE 'plain' END"
_LONE_NEXT = f"""CASE WHEN EXISTS (SELECT 1 FROM held) THEN 'full'
            WHEN EXISTS (SELECT 1 FROM served q WHERE {_has_key("q.name")})
            THEN 'lone' ELSE 'plain' END"""
_TAKEN_COLUMNS = ", ".join(f"taken.{column.strip()}" for column in CLAIM_COLUMNS.split(","))
_CLAIM_UPDATE = f"""
        UPDATE {{table}} SET status = '{{running}}', owner = %(owner)s::text, token = token + 1,
            updated_at = clock_timestamp(), cancel_requested = false,
            started_at = COALESCE(started_at, (SELECT at FROM claimed_at)),
            last_attempted_at = (SELECT at FROM claimed_at), attempts = attempts + 1,
            worker_ids = worker_ids || jsonb_build_array(%(owner)s::text)
        WHERE seq IN (SELECT seq FROM claimed)
        RETURNING {CLAIM_COLUMNS}"""
# As ``finish``, for every ending in the JSON array ``ends`` at once: each
# row fenced alike (its seq, owner, token, RUNNING and a live lease).
_FINISH_MANY = """
        UPDATE {table} AS t SET status = e.status, updated_at = clock_timestamp(),
            finished_at = CASE WHEN e.status = '{ready}' THEN NULL ELSE clock_timestamp() END,
            return_value = e.return_value::jsonb,
            errors = CASE WHEN e.error IS NULL THEN t.errors
                ELSE t.errors || jsonb_build_array(e.error) END,
            attempts = t.attempts - e.refund,
            active_key = CASE WHEN e.status = '{ready}' THEN t.active_key END,
            run_after = CASE WHEN e.delay > 0
                THEN clock_timestamp() + e.delay * interval '1 second' ELSE t.run_after END
        FROM jsonb_to_recordset(%(ends)s::jsonb) AS e(seq bigint, owner text, token bigint,
            status text, return_value text, error jsonb, refund integer, delay float8)
        WHERE t.seq = e.seq AND t.owner = e.owner AND t.token = e.token
            AND t.status = '{running}'
            AND t.updated_at >= clock_timestamp() - t.ttl * interval '1 second'
        RETURNING t.seq AS seq, t.status AS status, t.finished_at AS finished_at"""


# ``finish_many`` and a claim in one statement, so in one round trip and one
# commit: what a worker's threads do between two tasks. Each part is the
# statement it is alone. The claim reads the table as the statement began,
# so it takes nothing this statement ended (a retry made READY waits for the
# next claim) and no slot its ends give back (their trigger runs after it).
# One row at least: the seq and finished_at of the rows ended, as two arrays
# in one order, beside the first claimed row's columns (NULL when none was
# claimed), then a row for each other claimed row (the arrays repeated).
def _finish_claim(ctes: str, next_claim: str) -> str:
    """The statement of ``finish_many`` and the claim of ``ctes``, whose
    ``next_claim`` column is ``next_claim``."""
    return f"""
        WITH RECURSIVE ended AS ({_FINISH_MANY}
        ), {ctes.strip()}, taken AS ({_CLAIM_UPDATE}
        ), ends AS (
            SELECT array_agg(seq) AS ended_seq, array_agg(finished_at) AS ended_at FROM ended
        )
        SELECT ends.ended_seq, ends.ended_at, {next_claim} AS next_claim, {_TAKEN_COLUMNS}
        FROM ends LEFT JOIN taken ON true
"""


def _one_row_claim(ctes: str, next_claim: str) -> str:
    """The claim of ``ctes`` alone, in one row at least, as ``finish_claim``'s:
    ``next_claim`` beside the first claimed row's columns (NULL when none
    was claimed), then a row for each other claimed row."""
    return f"""
        WITH RECURSIVE {ctes.strip()}, taken AS ({_CLAIM_UPDATE}
        )
        SELECT {next_claim} AS next_claim, {_TAKEN_COLUMNS}
        FROM (SELECT 1) AS one LEFT JOIN taken ON true
"""


def _cancel(rows: str, returning: str) -> str:
    """An operator's cancel of the rows the condition ``rows`` names: a ready
    one fails at once, its error a ``TaskCancelled``; a running one is asked
    to stop (``cancel_requested``); a finished one is left alone."""
    return f"""
        UPDATE {{table}} SET cancel_requested = true,
            status = CASE WHEN status = '{{ready}}' THEN '{{failed}}' ELSE status END,
            active_key = CASE WHEN status = '{{ready}}' THEN NULL ELSE active_key END,
            errors = CASE WHEN status = '{{ready}}' THEN errors || jsonb_build_array(
                jsonb_build_object('exception_class_path', '{CANCELLED_ERROR_CLASS}',
                    'traceback', 'TaskCancelled: cancelled by an operator before it started'))
                ELSE errors END,
            finished_at = CASE WHEN status = '{{ready}}' THEN clock_timestamp()
                ELSE finished_at END
        WHERE {rows} AND status IN ('{{ready}}', '{{running}}')
        RETURNING {returning}
    """


QUEUE = QueueStatements(
    claim=f"""
        WITH RECURSIVE {_CLAIM_CTES.strip()}
{_CLAIM_UPDATE}, {_FULL_NEXT} AS next_claim
    """,
    plain_claim=_one_row_claim(_plain_claim_ctes(lone=False), _PLAIN_NEXT),
    lone_claim=_one_row_claim(_plain_claim_ctes(lone=True), _LONE_NEXT),
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
            active_key = CASE WHEN %(status)s::text = '{ready}' THEN active_key END,
            run_after = CASE WHEN %(delay)s::float8 > 0
                THEN clock_timestamp() + %(delay)s::float8 * interval '1 second'
                ELSE run_after END
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = '{running}'
            AND updated_at >= clock_timestamp() - ttl * interval '1 second'
        RETURNING status, finished_at
    """,
    finish_many=_FINISH_MANY,
    finish_claim=_finish_claim(_CLAIM_CTES, _FULL_NEXT),
    plain_finish_claim=_finish_claim(_plain_claim_ctes(lone=False), _PLAIN_NEXT),
    lone_finish_claim=_finish_claim(_plain_claim_ctes(lone=True), _LONE_NEXT),
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
        RETURNING uuid, status, task_path, owner
    """,
    cancel=_cancel("uuid = %(uuid)s", "status"),
    # Waiting for no row (queue/manager.py's cancel_many says why): those a
    # worker is writing are left to the next pass.
    cancel_many=_cancel(
        """seq IN (SELECT seq FROM {table} WHERE seq = ANY(%(seqs)s::bigint[])
            AND status IN ('{ready}', '{running}') FOR UPDATE SKIP LOCKED)""",
        "seq, status",
    ),
    # (alike sqlite/queue.py's cancel and ended on purpose: the same rules, in each dialect)
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
        RETURNING seq, uuid, task_path
    """,
    retry=QUEUE_RETRY,
    retry_many=queue_retry("seq = ANY(%(seqs)s::bigint[])", "RETURNING seq"),
    enqueue=_ENQUEUE,
    pause_queue="""
        INSERT INTO {paused} (queue_name, paused_at) VALUES (%(queue)s, clock_timestamp())
        ON CONFLICT (queue_name) DO NOTHING
        RETURNING 1 AS matched
    """,
    unpause_queue=UNPAUSE_QUEUE + " RETURNING 1 AS matched",
    paused_queues=PAUSED_QUEUES,
    # (The operator's reads alike on every vendor: shared.distinct_values.)
    queue_names=distinct_values("queue_name"),
    task_paths=distinct_values("task_path"),
    # An idle worker's poll (shared.ready_probe says why a read), by the
    # claim's queues and index: a look into each queue, in the claim's order,
    # so that it is the index's first entry (the LIMIT also keeps the planner
    # from making it one join of the queues with every ready row).
    # The operator's reads (admin, API, metrics, bgtasks list: each an index
    # read in seq order that a LIMIT stops) without bitmap and sequential
    # scans, for the rest of their transaction (``set_config(..., true)`` is
    # SET LOCAL). The planner otherwise trades such a read for a scan of
    # every matching row, sorted, when its statistics say there are few: a
    # bulk enqueue's statistics are stale until the next ANALYZE, and never
    # gathered where autovacuum is off. At 10,000,000 rows the admin's list
    # of the 8,000,000 succeeded tasks then took 4 to 18 s, and about 0.1 s
    # with these (docs/benchmarks.md, "A million tasks"). Every such read
    # has an index in its order (migration 0021): its index scan is left the
    # cheapest. Sorts are off too: the ready rows have two indexes, the
    # claim's and 0021's by seq, and with statistics that made the ready rows
    # few, the planner read every entry of the claim's, then sorted them, for
    # a page of 101 (a CI run: 6,198 pages read, where the index by seq reads
    # about 110). The queue's own statements never run in such a transaction.
    index_reads="""
        SELECT set_config('enable_bitmapscan', 'off', true) AS bitmap,
            set_config('enable_seqscan', 'off', true) AS seq,
            set_config('enable_sort', 'off', true) AS sort,
            set_config('enable_incremental_sort', 'off', true) AS incremental_sort
    """,
    any_ready=f"""
        WITH RECURSIVE {_QUEUES}
        SELECT EXISTS (
            SELECT 1 FROM served q
            CROSS JOIN LATERAL (
                SELECT 1 FROM {{table}} t WHERE {_CLAIMABLE}
                ORDER BY t.priority DESC, t.seq LIMIT 1
            ) due
        ) AS ready
    """,
)
