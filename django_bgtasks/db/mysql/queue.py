"""MySQL 8.0+ and MariaDB 10.6+: the Django Tasks queue's statements, and how
each one is run and its result read (the rules: :mod:`django_bgtasks.db.shared`;
the vendor's ways, the clock and the SET order: :mod:`django_bgtasks.db.mysql.leases`).

Without RETURNING, a write that hands back its rows is three steps in one
transaction, sent as one query (one round trip) where the connection allows
several statements in one (:func:`~django_bgtasks.db.mysql.leases.multi_statements`),
else in ``atomic()`` one step after another:

1. a locking read picks the rows (``FOR UPDATE``; a claim's ``SKIP LOCKED``,
   with its ``LIMIT``) and keeps their ``seq`` in a session variable, as a
   JSON array;
2. the UPDATE writes those rows, and no other (``JSON_TABLE`` over that array);
3. a read of them hands back the columns RETURNING gives on the other vendors.

The rows stay locked until the commit, so what step 3 reads is what step 2
wrote. The enqueue is an INSERT and a read
(:mod:`~django_bgtasks.db.mysql.enqueue`). A write of one row (finish,
cancel) has no step 1: the UPDATE's row count says whether it matched. A
claim keeps ``SKIP LOCKED`` only as long as the locking read stops at
``LIMIT``: InnoDB locks each row it reads, and a sort would read every ready
row. Migration 0012's index (status, priority DESC, seq) gives the claim's
order without a sort (MySQL 8.0 and MariaDB 10.8+; MariaDB 10.6 and 10.7
ignore DESC in an index, so concurrent claims there may find every ready row
locked and come back empty until their next poll).

Strings that JSON_TABLE reads have a collation of their own, so they are
compared in ``utf8mb4_bin`` (as PostgreSQL and SQLite compare them);
queue names with JSON_CONTAINS, which compares JSON strings exactly. There is
no NOTIFY: the workers' queue threads poll.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.mysql.enqueue import ENQUEUE
from django_bgtasks.db.mysql.leases import (
    MYSQL_STEP,
    Reader,
    count_rows,
    multi_statements,
    read_rows,
    renew_steps,
)
from django_bgtasks.db.mysql.leases import run_steps as steps
from django_bgtasks.db.mysql.routines import Routine, forget, routines
from django_bgtasks.db.rows import Row, named
from django_bgtasks.db.shared import (
    CANCELLED_ERROR_CLASS,
    CLAIM_COLUMNS,
    CONCURRENCY_SLOT_FREE,
    LOST_ERROR_CLASS,
    NOT_PAUSED,
    PAUSED_QUEUES,
    QUEUE_INDEX,
    UNPAUSE_QUEUE,
    QueueStatements,
    flow_slots_free,
    queue_pick,
    ready_probe,
)

NOW = "SYSDATE(6)"
_LIVE = f"updated_at >= {NOW} - INTERVAL ROUND(ttl * 1000000) MICROSECOND"
_STALE = f"updated_at < {NOW} - INTERVAL ROUND(ttl * 1000000) MICROSECOND"
_HOLDER = f"""seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
    AND status = '{{running}}' AND {_LIVE}"""
# The session variable step 1 keeps the picked rows' seq in, and those rows
# (named ``picked_seq``, so that the table's ``seq`` alone is ``seq``).
PICKED = "@bgtasks_picked"
PICKED_ROWS = f"JSON_TABLE({PICKED}, '$[*]' COLUMNS (picked_seq BIGINT PATH '$')) picked"
# Those rows of the table, for an UPDATE (``UPDATE {PICKED_JOIN} SET ...``) or
# a read (``SELECT ... FROM {PICKED_JOIN}``): each row looked up by its key,
# and no other row read. A locking read or a write locks every row it reads,
# so the plan must not be left to the optimizer, which reads a small table
# through (and a single-table UPDATE's IN (subquery) reads every row, before
# MariaDB 11.1). A read's ``seq IN (subquery)`` would materialise the
# subquery in a temporary table (MariaDB keeps one on disk when a column read
# is a BLOB); the rows' order is the caller's to make. A multi-table UPDATE
# may assign its SET at once, not left to right; the module's order (a SET
# that reads a column before the one that changes it) means the same either
# way.
PICKED_JOIN = (
    f"{PICKED_ROWS} STRAIGHT_JOIN {{table}} t FORCE INDEX (PRIMARY) ON t.seq = picked.picked_seq"
)


def _pick(rows: str) -> str:
    """Step 1: the ``seq`` of the rows the subquery ``rows`` locks, into the variable."""
    return f"SELECT JSON_ARRAYAGG(seq) AS picked FROM ({rows}) locked INTO {PICKED}"


# Step 1 of each statement that writes several rows. A claim skips the rows
# other claims are taking; a recovery, the rows being written now (a finish, a
# heartbeat: a stale one is recovered at the next pass, and a recovery never
# waits on a worker's write, nor deadlocks with one).
# A rate slot is free once its last start is a window ago (the window of
# the row ``t``).
_RATE_SLOT_FREE = (
    f"(s.started_at IS NULL OR s.started_at <= {NOW}"
    " - INTERVAL ROUND(t.rate_period * 1000000) MICROSECOND)"
)
RATE_FREE = f"""EXISTS (
            SELECT 1 FROM {{slots}} s
            WHERE s.kind = '{{rate}}' AND s.flow_key = t.rate_key AND s.slot <= t.rate_limit
                AND {_RATE_SLOT_FREE})"""
# The claim's pick keeps, beside the picked rows, whether any has a flow
# limit (MariaDB runs the flow steps only then: db/mysql/mariadb.py).
FLOW_PICKED = "@bgtasks_flow"
# A claim's time, read once its flow steps read the free slots (else NULL,
# set by each pick), for the rate slots' and rows' start alike (see
# postgresql/queue.py's ``claimed_at`` for why once, and why then).
CLAIMED_AT = "@bgtasks_claimed_at"
_CLAIM_TIME = f"COALESCE({CLAIMED_AT}, {NOW})"
# The ready rows a claim may take, but for the flow limits, as
# shared.queue_pick has them: of every queue, in the claim's order from its
# index (status, priority DESC, seq: migration 0012); of one named queue,
# from the ready rows' index led by the queue (status, queue_name, priority
# DESC, seq), whose equality there compares as the column's collation does
# (it ignores case on most tables), so the rows are held to the name byte
# for byte as well, as PostgreSQL and SQLite compare names. Each with the
# row's ``flow`` test, ``lock``ing what it returns, and at most ``limit``
# rows (also the idle poll's, without the flow test or the lock).
DUE = f"(run_after IS NULL OR run_after <= {NOW}) AND {NOT_PAUSED}"
_ONE_QUEUE = f"""queue_name = JSON_VALUE(%(queues)s, '$[{QUEUE_INDEX}]')
        AND BINARY queue_name = BINARY JSON_VALUE(%(queues)s, '$[{QUEUE_INDEX}]')"""


def _ready_rows(columns: str, flow: str, limit: str, lock: str) -> str:
    """The pick (shared.queue_pick) of the ready rows' ``columns`` (and their
    ``priority`` and ``seq``) that pass ``flow``: every queue's, or one's."""
    order = f"ORDER BY priority DESC, seq LIMIT {limit} {lock}"
    return queue_pick(
        f"""SELECT seq, priority, {columns} FROM {{table}} t FORCE INDEX (bgtasks_queued_claim)
        WHERE status = '{{ready}}' AND {DUE} AND {flow}
        {order}""",
        f"""SELECT seq, priority, {columns} FROM {{table}} t FORCE INDEX (bgtasks_queued_ready)
        WHERE status = '{{ready}}' AND {_ONE_QUEUE} AND {DUE} AND {flow}
        {order}""",
        limit,
    )


CLAIM_PICK = f"""SELECT JSON_ARRAYAGG(seq) AS picked,
        MAX(concurrency_key IS NOT NULL OR rate_key IS NOT NULL) AS flow, NULL AS claimed_at
    FROM ({
    _ready_rows(
        "concurrency_key, rate_key",
        flow_slots_free(CONCURRENCY_SLOT_FREE, RATE_FREE),
        "%(limit)s",
        "FOR UPDATE SKIP LOCKED",
    )
}) locked INTO {PICKED}, {FLOW_PICKED}, {CLAIMED_AT}"""
# The flow limits (db/shared.py): the free slots of the picked rows' keys,
# locked (skipping those other claims are taking) into a variable each; then
# each picked row paired with the free slot of its rank within its key, and
# the picked rows narrowed to those that got every slot they need
# (``PICKED``), with their slots (``_TAKEN``); the slots written; the rows
# claimed. For rows without limits each of these steps reads nothing.
# (MariaDB locks the free slots its own way: db/mysql/mariadb.py.)
CSLOTS, RSLOTS, _TAKEN = "@bgtasks_cslots", "@bgtasks_rslots", "@bgtasks_taken"


def _free_slots(kind: str, key: str, free: str, into: str) -> str:
    return f"""SELECT JSON_ARRAYAGG(id) AS free FROM (
        SELECT DISTINCT s.id FROM {PICKED_JOIN}
            STRAIGHT_JOIN {{slots}} s FORCE INDEX (bgtasks_flow_slot)
                ON s.kind = '{{{kind}}}' AND s.flow_key = t.{key}
        WHERE {free}
        FOR UPDATE SKIP LOCKED) free INTO {into}"""


def _ranked_slots(variable: str, alias: str) -> str:
    return f"""(SELECT s.id, s.flow_key, s.slot,
            ROW_NUMBER() OVER (PARTITION BY s.flow_key ORDER BY s.slot) AS rnk
        FROM JSON_TABLE(COALESCE({variable}, '[]'), '$[*]' COLUMNS (id BIGINT PATH '$')) f
            STRAIGHT_JOIN {{slots}} s FORCE INDEX (PRIMARY) ON s.id = f.id) {alias}"""


_ASSIGN = f"""
    SELECT JSON_ARRAYAGG(c.seq) AS picked,
        JSON_ARRAYAGG(JSON_OBJECT('seq', c.seq, 'token', c.token + 1, 'c', c.cslot, 'r', rs.id))
            AS taken,
        {NOW} AS claimed_at
    FROM (
        SELECT p.*,
            ROW_NUMBER() OVER (PARTITION BY p.rate_key ORDER BY p.priority DESC, p.seq) AS rrank
        FROM (
            SELECT c.*, cs.id AS cslot
            FROM (
                SELECT t.seq, t.token, t.priority, t.concurrency_key, t.concurrency, t.rate_key,
                    t.rate_limit,
                    ROW_NUMBER() OVER (
                        PARTITION BY t.concurrency_key ORDER BY t.priority DESC, t.seq
                    ) AS crank
                FROM {PICKED_JOIN}
            ) c
            LEFT JOIN {_ranked_slots(CSLOTS, "cs")}
                ON cs.flow_key = c.concurrency_key AND cs.rnk = c.crank
                AND cs.slot <= c.concurrency
            WHERE c.concurrency_key IS NULL OR cs.id IS NOT NULL
        ) p
    ) c
    LEFT JOIN {_ranked_slots(RSLOTS, "rs")}
        ON rs.flow_key = c.rate_key AND rs.rnk = c.rrank AND rs.slot <= c.rate_limit
    WHERE c.rate_key IS NULL OR rs.id IS NOT NULL
    INTO {PICKED}, {_TAKEN}, {CLAIMED_AT}
"""
_TAKEN_ROWS = (
    f"JSON_TABLE(COALESCE({_TAKEN}, '[]'), '$[*]' COLUMNS (seq BIGINT PATH '$.seq',"
    " token BIGINT PATH '$.token', c BIGINT PATH '$.c', r BIGINT PATH '$.r')) taken"
)
_TAKE_SLOTS = f"""
    UPDATE {_TAKEN_ROWS} STRAIGHT_JOIN {{slots}} s FORCE INDEX (PRIMARY)
        ON s.id = taken.c OR s.id = taken.r
    SET s.started_at = CASE WHEN s.id = taken.r THEN {CLAIMED_AT} ELSE s.started_at END,
        s.seq = taken.seq, s.token = taken.token
"""
# The steps after the free slots are locked: the rows paired with them, and
# the slots written.
FLOW_ASSIGN = [_ASSIGN, _TAKE_SLOTS]
CLAIM_FLOW = [
    _free_slots(
        "concurrency", "concurrency_key", "s.seq IS NULL AND s.slot <= t.concurrency", CSLOTS
    ),
    _free_slots("rate", "rate_key", f"s.slot <= t.rate_limit AND {_RATE_SLOT_FREE}", RSLOTS),
    *FLOW_ASSIGN,
]
# A recovery finds the stale rows by a read that locks nothing, then locks
# them by primary key, checking each again. Its ttl is in no index, so a
# locking read through bgtasks_queued_running reads every running row, and
# InnoDB keeps the lock of each live row it read till the commit, even
# under READ COMMITTED: each heartbeat would wait for that recovery's end
# (for as long as its client takes, with ``multi_statements`` off).
_STALE_SEQS = "@bgtasks_stale"
_FIND_STALE = f"""SELECT JSON_ARRAYAGG(seq) AS stale
    FROM {{table}} FORCE INDEX (bgtasks_queued_running)
    WHERE status = '{{running}}' AND {_STALE} INTO {_STALE_SEQS}"""
_LOCK_STALE = _pick(
    f"""SELECT t.seq FROM JSON_TABLE({_STALE_SEQS}, '$[*]' COLUMNS (seq BIGINT PATH '$')) stale
        STRAIGHT_JOIN {{table}} t FORCE INDEX (PRIMARY) ON t.seq = stale.seq
    WHERE t.status = '{{running}}' AND {_STALE}
    FOR UPDATE SKIP LOCKED"""
)
_RECOVER_PICK = f"{_FIND_STALE}{MYSQL_STEP}{_LOCK_STALE}"
_GIVE_BACK_PICK = _pick(
    """SELECT seq FROM {table} FORCE INDEX (bgtasks_queued_running)
    WHERE owner = %(owner)s AND status = '{running}'
        AND seq NOT IN (SELECT held.seq FROM JSON_TABLE(%(held)s, '$[*]'
            COLUMNS (seq BIGINT PATH '$')) held)
    FOR UPDATE"""
)


# Alike in postgresql/queue.py and sqlite/queue.py on purpose: the same statements, here
# with the SET ordered as MySQL needs it (a SET that reads a column comes
# before the one that changes it) and without RETURNING.
#
# As ``finish``, for every ending in the JSON array ``ends`` (db/shared.py's
# interface): each row fenced alike. MariaDB reads the array from a variable.
def ends_rows(source: str) -> str:
    """The endings of the JSON array ``source`` as rows ``e``, ``n`` their place."""
    return f"""JSON_TABLE({source}, '$[*]' COLUMNS (n FOR ORDINALITY, seq BIGINT PATH '$.seq',
    owner VARCHAR(200) CHARACTER SET utf8mb4 PATH '$.owner', token BIGINT PATH '$.token',
    status VARCHAR(16) PATH '$.status', return_value LONGTEXT PATH '$.return_value',
    error JSON PATH '$.error', refund INT PATH '$.refund', delay DOUBLE PATH '$.delay')) e"""


def finish_many_pick(source: str) -> str:
    """Step 1 locks the rows whose ending matches them, so step 2 writes those alone."""
    return _pick(f"""SELECT t.seq FROM {ends_rows(source)}
        STRAIGHT_JOIN {{table}} t FORCE INDEX (PRIMARY) ON t.seq = e.seq
    WHERE t.owner = e.owner COLLATE utf8mb4_bin AND t.token = e.token
        AND t.status = '{{running}}' AND t.{_LIVE}
    FOR UPDATE""")


def end_set(return_value: str = "e.return_value", error: str = "e.error") -> str:
    """Step 2's SET: the row ``t`` ended as its ending ``e`` says, whose
    ``return_value`` and ``error`` are read as these two expressions."""
    return f"""SET t.status = e.status, t.updated_at = {NOW},
        t.finished_at = CASE WHEN e.status = '{{ready}}' THEN NULL ELSE {NOW} END,
        t.return_value = {return_value},
        t.errors = CASE WHEN {error} IS NULL OR JSON_TYPE({error}) = 'NULL' THEN t.errors
            ELSE JSON_ARRAY_APPEND(t.errors, '$', JSON_EXTRACT({error}, '$')) END,
        t.attempts = t.attempts - e.refund,
        t.active_key = CASE WHEN e.status = '{{ready}}' THEN t.active_key END,
        t.run_after = CASE WHEN e.delay > 0
            THEN {NOW} + INTERVAL ROUND(e.delay * 1000000) MICROSECOND ELSE t.run_after END"""


FINISHED_READ = f"SELECT seq, status, finished_at FROM {PICKED_JOIN}"
FINISH_MANY = MYSQL_STEP.join([
    finish_many_pick("%(ends)s"),
    f"UPDATE {PICKED_JOIN} STRAIGHT_JOIN {ends_rows('%(ends)s')} ON e.seq = t.seq {end_set()}",
    FINISHED_READ,
])  # fmt: skip


# The claim's last two steps: the picked rows claimed, and read.
CLAIM_WRITE = f"""
        UPDATE {PICKED_JOIN}
        SET status = '{{running}}', owner = %(owner)s, token = token + 1,
            updated_at = {NOW}, cancel_requested = 0,
            started_at = COALESCE(started_at, {_CLAIM_TIME}), last_attempted_at = {_CLAIM_TIME},
            attempts = attempts + 1, worker_ids = JSON_ARRAY_APPEND(worker_ids, '$', %(owner)s)
        {MYSQL_STEP}
        SELECT {CLAIM_COLUMNS} FROM {PICKED_JOIN}
"""


# The next value of a column after ``%(after)s``, from the index it leads
# (migration 0021): a step of ``_loose_scan``.
_NEXT_VALUE = "SELECT MIN({column}) AS value FROM {{table}} WHERE {column} > %(after)s"
# The most names a loose scan lists (a bound on its loop, far above any site's).
MAX_NAMES = 100_000


# An operator's cancel (status last: the other columns read what it was).
_CANCEL_SET = f"""cancel_requested = 1,
            active_key = CASE WHEN status = '{{ready}}' THEN NULL ELSE active_key END,
            finished_at = CASE WHEN status = '{{ready}}' THEN {NOW} ELSE finished_at END,
            errors = CASE WHEN status = '{{ready}}' THEN JSON_ARRAY_APPEND(errors, '$',
                JSON_OBJECT('exception_class_path', '{CANCELLED_ERROR_CLASS}',
                    'traceback', 'TaskCancelled: cancelled by an operator before it started'))
                ELSE errors END,
            status = CASE WHEN status = '{{ready}}' THEN '{{failed}}' ELSE status END"""
# An operator's retry (db.shared.QUEUE_RETRY).
_RETRY_SET = """status = '{ready}', run_after = NULL, finished_at = NULL,
            return_value = NULL, cancel_requested = 0,
            max_attempts = CASE WHEN attempts >= max_attempts THEN attempts + 1
                ELSE max_attempts END,
            active_key = NULLIF(unique_key, '')"""
_RETRY_FAILED = """status = '{failed}'
            AND unique_key NOT IN (SELECT held.active_key FROM (
                SELECT DISTINCT active_key FROM {table} WHERE active_key IS NOT NULL) held)"""
# A bulk action's batch, the JSON array ``seqs``: each row looked up by its
# key, as PICKED_JOIN's; and the step that locks those a cancel changes,
# waiting for none (those a worker is writing are left to the next pass:
# queue/manager.py's cancel_many says why).
_LISTED_JOIN = (
    "JSON_TABLE(%(seqs)s, '$[*]' COLUMNS (listed_seq BIGINT PATH '$')) listed"
    " STRAIGHT_JOIN {table} t FORCE INDEX (PRIMARY) ON t.seq = listed.listed_seq"
)
_LISTED_PICK = _pick(
    f"""SELECT t.seq FROM {_LISTED_JOIN}
    WHERE t.status IN ('{{ready}}', '{{running}}') FOR UPDATE SKIP LOCKED"""
)


QUEUE = QueueStatements(
    claim=MYSQL_STEP.join([CLAIM_PICK, *CLAIM_FLOW, CLAIM_WRITE]),
    # As the lease's renew (leases.py): a match of the first step is a renewal
    # without a cancel request; only then the second, with one.
    renew=f"""
        UPDATE {{table}} SET updated_at = {NOW},
            progress = CASE WHEN %(set_progress)s THEN %(progress)s ELSE progress END
        WHERE {_HOLDER} AND NOT cancel_requested
        {MYSQL_STEP}
        UPDATE {{table}} SET updated_at = {NOW},
            progress = CASE WHEN %(set_progress)s THEN %(progress)s ELSE progress END
        WHERE {_HOLDER}
    """,
    finish=f"""
        UPDATE {{table}} SET status = %(status)s, updated_at = {NOW},
            finished_at = CASE WHEN %(status)s = '{{ready}}' THEN NULL ELSE {NOW} END,
            return_value = %(return_value)s,
            errors = CASE WHEN %(error)s IS NULL THEN errors
                ELSE JSON_ARRAY_APPEND(errors, '$', JSON_EXTRACT(%(error)s, '$')) END,
            attempts = attempts - %(refund)s,
            active_key = CASE WHEN %(status)s = '{{ready}}' THEN active_key END,
            run_after = CASE WHEN %(delay)s > 0
                THEN {NOW} + INTERVAL ROUND(%(delay)s * 1000000) MICROSECOND ELSE run_after END
        WHERE {_HOLDER}
        {MYSQL_STEP}
        SELECT status, finished_at FROM {{table}} WHERE seq = %(seq)s
    """,
    recover=f"""
        {_RECOVER_PICK}
        {MYSQL_STEP}
        UPDATE {PICKED_JOIN}
        SET
            errors = JSON_ARRAY_APPEND(errors, '$', JSON_OBJECT(
                'exception_class_path', '{LOST_ERROR_CLASS}',
                'traceback', CONCAT('LeaseLost: the worker ', owner, ' was lost: no heartbeat ',
                    'within the ttl (', ttl, ' s), on attempt ', attempts,
                    ' of ', max_attempts))),
            active_key = CASE WHEN attempts < max_attempts THEN active_key END,
            finished_at = CASE WHEN attempts < max_attempts THEN NULL ELSE {NOW} END,
            status = CASE WHEN attempts < max_attempts THEN '{{ready}}' ELSE '{{failed}}' END
        {MYSQL_STEP}
        SELECT uuid, status, task_path, owner FROM {PICKED_JOIN}
    """,
    # Status last: the other columns read what it was.
    cancel=f"""
        UPDATE {{table}} SET {_CANCEL_SET}
        WHERE uuid = %(uuid)s AND status IN ('{{ready}}', '{{running}}')
        {MYSQL_STEP}
        SELECT status FROM {{table}} WHERE uuid = %(uuid)s
    """,
    cancel_many=f"""
        {_LISTED_PICK}
        {MYSQL_STEP}
        UPDATE {PICKED_JOIN} SET {_CANCEL_SET}
        {MYSQL_STEP}
        SELECT seq, status FROM {PICKED_JOIN}
    """,
    ended="""
        SELECT status, finished_at FROM {table}
        WHERE seq = %(seq)s AND owner = %(owner)s AND token = %(token)s
            AND status = %(status)s
    """,
    # started_at reads the attempts before they are given back; the worker
    # added last to worker_ids is removed.
    give_back=f"""
        {_GIVE_BACK_PICK}
        {MYSQL_STEP}
        UPDATE {PICKED_JOIN} SET
            started_at = CASE WHEN attempts = 1 THEN NULL ELSE started_at END,
            attempts = attempts - 1, updated_at = {NOW}, status = '{{ready}}',
            worker_ids = JSON_REMOVE(worker_ids, CONCAT('$[', JSON_LENGTH(worker_ids) - 1, ']'))

        {MYSQL_STEP}
        SELECT seq, uuid, task_path FROM {PICKED_JOIN}
    """,
    # As db.shared.QUEUE_RETRY. MySQL refuses a subquery on the table an
    # UPDATE writes unless it is a derived table (materialised first).
    retry=f"""
        UPDATE {{table}} SET {_RETRY_SET}
        WHERE uuid = %(uuid)s AND {_RETRY_FAILED}
    """,
    retry_many=f"""
        UPDATE {_LISTED_JOIN} SET {_RETRY_SET}
        WHERE {_RETRY_FAILED}
    """,
    finish_many=FINISH_MANY,
    enqueue=ENQUEUE,
    # A name already paused is left alone (IGNORE: the duplicate key alone
    # can happen, the name's length is checked before any SQL).
    pause_queue=f"""
        INSERT IGNORE INTO {{paused}} (queue_name, paused_at) VALUES (%(queue)s, {NOW})
    """,
    unpause_queue=UNPAUSE_QUEUE,
    paused_queues=PAUSED_QUEUES,
    # The names there are, a step at a time (_loose_scan): MariaDB answers
    # each step at once, where in one recursive statement it read the whole
    # index a step (20 s for the 500 task paths of 60,000 rows).
    queue_names=_NEXT_VALUE.format(column="queue_name"),
    task_paths=_NEXT_VALUE.format(column="task_path"),
    any_ready=ready_probe(_ready_rows("1 AS due", "TRUE", "1", "")),
)

# --- How a statement is run, and its result read -----------------------------------------


def _loose_scan(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """The values of ``query`` (``_NEXT_VALUE``'s) each once, in order: a
    statement each, from the one after "" (no name is blank). Each step is
    one descent of the column's index; the loop stops at the end, or at
    ``MAX_NAMES`` names."""
    found: list[Row] = []
    after = ""
    for _ in range(MAX_NAMES):
        [row] = read_rows(connection, statement, query, {"after": after})
        if row["value"] is None or (found and row["value"] == after):  # (it only rises)
            break
        found.append(row)
        after = row["value"]
    return found


def _transaction(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """The steps of ``query`` in one transaction: the rows of the last, a read,
    when the write before it matched any row, else none."""
    return in_one_transaction(connection, [statement], [query], params)[0]


def in_one_transaction(
    connection: BaseDatabaseWrapper,
    statements: Sequence[str],
    queries: Sequence[str],
    params: dict[str, Any],
) -> list[list[Row]]:
    """The steps of each of ``queries`` (``statements``, each of them run by
    :func:`_transaction`), one after the other in one transaction, sent as
    one query where the connection allows (on MariaDB, a claim's and an
    end's as the ``CALL`` of their procedure: db/mysql/routines.py): each
    one's rows, as :func:`_transaction` reads them. ``params`` holds every
    query's."""
    for statement in statements:
        if READERS[statement] is not _transaction:
            raise ValueError(f"{statement!r} is not a write of steps")
    if not multi_statements(connection):
        return _one_step_at_a_time(connection, queries, params)
    # On MariaDB the hot writes are procedures (db/mysql/routines.py). A
    # transaction that found one missing, or not ours to call, is rolled
    # back, and sent again with it created, or as text.
    calls = routines(connection, statements, queries)
    try:
        return _in_one_query(connection, calls, queries, params)
    except DatabaseError as error:
        if not any(calls) or not forget(connection, error):
            raise
    return _in_one_query(connection, routines(connection, statements, queries), queries, params)


def _one_step_at_a_time(
    connection: BaseDatabaseWrapper, queries: Sequence[str], params: dict[str, Any]
) -> list[list[Row]]:
    """:func:`in_one_transaction` where the connection can't send several
    statements in one query: each step, in ``atomic()``."""
    results: list[list[Row]] = []
    with connection.cursor() as cursor, transaction.atomic(using=connection.alias):
        for *before, write, last in (query.split(MYSQL_STEP) for query in queries):
            for step in before:
                cursor.execute(step, params)
            cursor.execute(write, params)
            written = cursor.rowcount
            if written:
                cursor.execute(last, params)
            results.append(named(cursor) if written else [])
    return results


def _in_one_query(
    connection: BaseDatabaseWrapper,
    calls: Sequence[Routine | None],
    queries: Sequence[str],
    params: dict[str, Any],
) -> list[list[Row]]:
    """:func:`in_one_transaction` in one query: each query's steps, or the
    ``CALL`` of its procedure where it has one (whose one result is the rows
    of its last step: none where the write before matched none)."""
    parts = [
        [call.call] if call else query.split(MYSQL_STEP)
        for call, query in zip(calls, queries, strict=True)
    ]
    steps = ["START TRANSACTION", *(step for part in parts for step in part), "COMMIT"]
    results: list[list[Row]] = []
    with connection.cursor() as cursor:
        try:
            cursor.execute(MYSQL_STEP.join(steps), params)
            # An error in a later step is raised by nextset(), and the server
            # runs nothing after it: the transaction is rolled back below.
            with connection.wrap_database_errors:
                for call, part in zip(calls, parts, strict=True):
                    if call:
                        cursor.nextset()
                        results.append(named(cursor))
                        cursor.nextset()  # the CALL's own
                        continue
                    for _ in part[:-2]:
                        cursor.nextset()
                    cursor.nextset()  # the write's
                    written = cursor.rowcount
                    cursor.nextset()
                    results.append(named(cursor) if written else [])
                cursor.nextset()  # the COMMIT's
        except BaseException:
            with contextlib.suppress(DatabaseError), connection.wrap_database_errors:
                cursor.execute("ROLLBACK")
            raise
        return results


# How each statement is run and read (see the readers above and leases.py's).
READERS: dict[str, Reader] = {
    "claim": _transaction,
    "renew": renew_steps,
    "finish": _transaction,
    "finish_many": _transaction,
    "recover": _transaction,
    "cancel": _transaction,
    "cancel_many": _transaction,
    "ended": read_rows,
    "give_back": _transaction,
    "retry": count_rows,
    "retry_many": count_rows,
    "enqueue": steps,
    "pause_queue": count_rows,
    "unpause_queue": count_rows,
    "paused_queues": read_rows,
    "any_ready": read_rows,
    "queue_names": _loose_scan,
    "task_paths": _loose_scan,
}
