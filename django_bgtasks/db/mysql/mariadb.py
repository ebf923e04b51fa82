"""MariaDB's statements of the Django Tasks queue, and their readers, where
they differ from MySQL's (:mod:`~django_bgtasks.db.mysql.queue`, which
MariaDB runs otherwise).

The enqueue is its INSERT alone, ending in RETURNING (10.5+), where MySQL
reads what it stored by a second statement; of one task, an INSERT of its
``VALUES`` (:func:`_enqueue`).

Each UPDATE of the picked rows (a claim's, a recovery's, a give-back's) is a
loop of one-row UPDATEs (:func:`_row_by_row`), where MySQL's is one
multi-table UPDATE: MariaDB keeps that one's new values in an internal
temporary table first, and keeps such a table on disk when it holds a BLOB
(``worker_ids``, ``errors``). Each claim and each end then created and
deleted a file: a quarter of the server's CPU in a drain went to the files
(docs/benchmarks.md, "MariaDB: no file a claim"). An end's loop reads the
ending's two BLOBs from the array, by its place, not from its rows, which a
loop keeps in a temporary table.

The claim's flow steps (the free slots of the picked rows' keys, the rows
paired with them, the slots written) read nothing when no picked row has a
flow limit, yet each is still parsed and run: 0.6-0.8 ms of the server's
CPU a claim on the development machine, a quarter of a worker's round (an
end and a claim) of one task without limits. MariaDB runs them inside a
compound statement (``BEGIN NOT ATOMIC``, which MySQL has only in stored
programs) only when the pick found a row with a limit; without one, the
picked rows are claimed as they are, which is what the steps would have
left.

Its claim gives the keys of fair shares their turns (``CLAIM_FAIR_PICK``,
``_FAIR_TURNS``), in compound statements a queue, a key and a turn at a
time, since it has no LATERAL; MySQL's claim takes tasks in priority and
enqueue order as without a key, for now.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.mysql.enqueue import (
    ENQUEUE_HELD,
    ENQUEUE_INSERT,
    ONE_TASK_OWN,
    enqueued,
    stored_values,
)
from django_bgtasks.db.mysql.leases import MYSQL_STEP, Reader, read_rows
from django_bgtasks.db.mysql.queue import (
    CLAIM_PICK,
    CLAIM_WRITE,
    CLAIMED_AT,
    CSLOTS,
    DUE,
    FINISHED_READ,
    FLOW_ASSIGN,
    FLOW_PICKED,
    NOW,
    PICKED,
    PICKED_JOIN,
    PICKED_ROWS,
    RATE_FREE,
    RSLOTS,
    end_set,
    ends_rows,
    finish_many_pick,
)
from django_bgtasks.db.mysql.queue import QUEUE as MYSQL_QUEUE
from django_bgtasks.db.mysql.queue import READERS as MYSQL_READERS
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import CONCURRENCY_SLOT_FREE, ENQUEUE_COLUMNS, flow_slots_free


def _free_slots(
    kind: str, key: str, most: str, free: str, order: str, index: str, into: str
) -> str:
    """The free slots of each ``key`` (a column) of the picked rows, locked,
    skipping those other claims are taking, into the variable ``into`` (a
    JSON array of ids): at most the claim's limit of each key's, in
    ``order`` from ``index``. MySQL's step (db/mysql/queue.py) locks every
    free slot of each key: with a limit of 10,000 that never binds, a claim
    of 8 tasks read 20,000 slots and more. A key at a time, each read stops
    at the limit (MariaDB has no LATERAL: a loop over the keys, which are
    few, in the compound statement). ``most`` is the largest slot number a
    row of the key may take, ``free`` the slot ``s``'s test (of the key
    ``each_key``)."""
    return f"""SET {into} = JSON_ARRAY();
        FOR each_key IN (
            SELECT t.{key} AS flow_key, {most} FROM {PICKED_JOIN}
            WHERE t.{key} IS NOT NULL GROUP BY t.{key}
        ) DO
            SELECT JSON_ARRAYAGG(id) INTO @bgtasks_key_slots FROM (
                SELECT s.id FROM {{slots}} s FORCE INDEX ({index})
                WHERE s.kind = '{{{kind}}}' AND s.flow_key = each_key.flow_key
                    AND s.slot <= each_key.most AND {free}
                ORDER BY {order} LIMIT %(limit)s
                FOR UPDATE SKIP LOCKED) free;
            SET {into} = JSON_MERGE_PRESERVE({into}, COALESCE(@bgtasks_key_slots, JSON_ARRAY()));
        END FOR"""


_CLAIM_FLOW = [
    _free_slots(
        "concurrency",
        "concurrency_key",
        "MAX(t.concurrency) AS most",
        "s.seq IS NULL",
        "s.slot",
        "bgtasks_flow_slot",
        CSLOTS,
    ),
    _free_slots(
        "rate",
        "rate_key",
        "MAX(t.rate_limit) AS most, MAX(t.rate_period) AS period",
        f"(s.started_at IS NULL OR s.started_at <= {NOW}"
        " - INTERVAL ROUND(each_key.period * 1000000) MICROSECOND)",
        "s.started_at",  # NULL (never started) first
        "bgtasks_flow_slot_started",
        RSLOTS,
    ),
    *FLOW_ASSIGN,
]
# One step for the readers (db/mysql/queue.py): a compound statement is one
# statement, with one result.
_FLOW_WHEN_LIMITED = (
    f"BEGIN NOT ATOMIC IF {FLOW_PICKED} THEN {'; '.join(step.strip() for step in _CLAIM_FLOW)};"
    " END IF; END"
)

# Fair shares (docs/django-tasks.md, "Fair shares"; PostgreSQL's claim,
# db/postgresql/queue.py, is the reference, in one statement). MariaDB has no
# LATERAL, so the claim's first step is a compound statement that reads a
# queue, a key, a turn at a time, keeping what it found in session
# variables as JSON, as the flow steps do:
#
# 1. the served queues (``%(queues)s`` less the paused ones, or with
#    ``%(all)s`` those with a ready task, by a loose scan of the ready rows'
#    index), each probed for its lowest and its highest key: a descent of
#    migration 0028's index (status, queue_name, fairness_key, priority
#    DESC, seq) each (``_KEYED``). Where no queue has two keys, or a key
#    beside tasks without one, the claim is the plain pick, as before.
# 2. Else, a queue at a time: a queue without keys or with one alone, its
#    first ready rows; one with keys, its rows without a key (the head of that
#    index: never past the keyed backlog), its keys that have a task to
#    start (due, and let by the flow limits), each at the highest priority
#    it has one (a loose scan, one descent a key, passing over the rows that
#    can't start), and those of the highest such priority, which compete:
#    keyed tasks for tomorrow, or held by a limit, had held every keyed task
#    of a lower priority back. With two
#    or more, their turn rows are all locked, in id order (a JSON array of
#    their ids that a straight join follows), waiting for a claim that holds
#    them, as PostgreSQL's claim does: InnoDB's locking read returns each
#    row's newest version, so the turns are ordered by what the claims before
#    this one wrote, and no key gets two turns in a row while another waits.
#    (Locked SKIP LOCKED and rechecked instead, a claim passed over the keys
#    other claims held, and a key started twice in a row under 4 claimers.)
#    Then the first ``limit`` keys in turn order (each has a task to start:
#    a key whose next tasks wait for a retry's delay or a limit was not
#    read, so it takes no turn and holds none back), or a lone key, or one
#    without a row of turns, get their first due rows, each a stride (1 /
#    weight) after the one before.
# 3. The candidates in the claim's order: priority, tasks without a key
#    first, virtual start, the key's last turn (never first), seq.
#
# After the flow steps (which may drop rows), the turns of the keys that
# started tasks move on (``_FAIR_TURNS``). A lone key keeps no turns.
#
# Every read into a variable is a ``SELECT ... INTO``, never ``SET v =
# (SELECT ...)`` or ``IF (SELECT ...)``: InnoDB reads a stored program's SET
# and IF subqueries with shared locks (a plain SELECT reads the snapshot), so
# claims at once deadlocked on the turns' index (the queue's clock), and a
# key's probe would wait on a ready row another claim holds.
_FAIR = "@bgtasks_fair"  # the picked keyed rows' turns: seq, row of turns, key...
_CANDS = "@bgtasks_cands"
_FAIR_INDEX = "bgtasks_queued_fair"
# The ready rows of the queue ``qname`` (named: byte for byte too; every
# queue: as the index compares, since the loose scan found one name of those
# its collation makes equal).
_IN_QUEUE = (
    "t.status = '{ready}' AND t.queue_name = qname"
    " AND (%(all)s OR BINARY t.queue_name = BINARY qname)"
)
_FLOW_FREE = flow_slots_free(CONCURRENCY_SLOT_FREE, RATE_FREE)
_FLOW_OF_ROW = "(t.concurrency_key IS NOT NULL OR t.rate_key IS NOT NULL)"


def _add_candidates(rows: str, fields: str, where: str = "TRUE") -> str:
    """The rows of the locking read ``rows`` (``l``) appended to the
    candidates, each the JSON object of ``fields``."""
    return f"""SELECT JSON_ARRAYAGG(JSON_OBJECT({fields})) AS more INTO @bgtasks_more
                FROM ({rows}) l WHERE {where};
            SET {_CANDS} = JSON_MERGE_PRESERVE({_CANDS}, COALESCE(@bgtasks_more, JSON_ARRAY()))"""


def _startable(where: str) -> str:
    """The ready rows of the queue ``qname`` that ``where`` names and that
    may start now: due, and let by the flow limits."""
    return f"{_IN_QUEUE} AND {where} AND {DUE} AND {_FLOW_FREE}"


def _first_rows(index: str, where: str, order: str) -> str:
    return f"""SELECT t.seq, t.priority, t.fairness_weight, {_FLOW_OF_ROW} AS flow
                FROM {{table}} t FORCE INDEX ({index})
                WHERE {_startable(where)}
                ORDER BY {order} LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""


_PLAIN_FIELDS = "'seq', l.seq, 'p', l.priority, 'f', 0, 'v', 0, 'fl', l.flow"
_VSTART = "k.v0 + (l.rn - 1) / CAST(COALESCE(l.fairness_weight, 1) AS DOUBLE)"
_KEY_ROWS = (
    "SELECT r.*, ROW_NUMBER() OVER (ORDER BY r.seq) AS rn FROM ("
    + _first_rows(_FAIR_INDEX, "t.fairness_key = fkey AND t.priority = top_priority", "t.seq")
    + ") r"
)
_KEY_FIELDS = f"""'seq', l.seq, 'p', l.priority, 'f', 1, 'v', {_VSTART}, 'lt', k.st,
                    'fl', l.flow, 'fk', k.fk, 'sh', k.sh, 'q', qname, 'k', k.k, 'c', queue_clock,
                    'w', COALESCE(l.fairness_weight, 1)"""
_KEY_COLUMNS = "k VARCHAR(255) CHARACTER SET utf8mb4 PATH '$.k'"
# A competing key as the claim read it: its row of turns, that row's next
# turn and last start (to recheck on the lock), and its next turn from the
# queue's clock.
_SEEN_COLUMNS = (
    f"{_KEY_COLUMNS}, sh BIGINT PATH '$.sh', vt DOUBLE PATH '$.vt',"
    " st DATETIME(6) PATH '$.st', v0 DOUBLE PATH '$.v0'"
)
# A queue's candidates: without keys, its first ready rows; with keys, its
# first rows without one; and each key's given a turn.
_PLAIN_QUEUE = _add_candidates(
    _first_rows("bgtasks_queued_ready", "TRUE", "t.priority DESC, t.seq"), _PLAIN_FIELDS
)
_UNKEYED = _add_candidates(
    _first_rows(_FAIR_INDEX, "t.fairness_key IS NULL", "t.priority DESC, t.seq"), _PLAIN_FIELDS
)
_KEYS_TURN = _add_candidates(_KEY_ROWS, _KEY_FIELDS)
_QUEUE_COLUMN = "VARCHAR(100) CHARACTER SET utf8mb4"
_FAIR_PICK = f"""
    FOR q IN (SELECT s.n, s.k FROM JSON_TABLE(@bgtasks_served, '$[*]' COLUMNS (
            n {_QUEUE_COLUMN} PATH '$.n', k INT PATH '$.k')) s) DO
        SET qname = q.n;
        IF NOT q.k THEN
            {_PLAIN_QUEUE};
        ELSE
            {_UNKEYED};
            SET @bgtasks_keys = JSON_ARRAY(), fkey = '', top_priority = NULL;
            key_scan: LOOP
                SELECT MAX(x.found) AS found INTO @bgtasks_key FROM (
                    SELECT JSON_OBJECT('k', t.fairness_key, 'p', t.priority) AS found
                    FROM {{table}} t FORCE INDEX ({_FAIR_INDEX})
                    WHERE {_startable("t.fairness_key > fkey")}
                    ORDER BY t.fairness_key, t.priority DESC, t.seq LIMIT 1) x;
                IF @bgtasks_key IS NULL THEN
                    LEAVE key_scan;
                END IF;
                SET fkey = JSON_VALUE(@bgtasks_key, '$.k'),
                    top_priority = GREATEST(COALESCE(top_priority, -2147483648),
                        CAST(JSON_VALUE(@bgtasks_key, '$.p') AS SIGNED)),
                    @bgtasks_keys = JSON_ARRAY_APPEND(
                        @bgtasks_keys, '$', JSON_EXTRACT(@bgtasks_key, '$'));
            END LOOP key_scan;
            SELECT COALESCE(MAX(s.turn), 0) AS clock INTO queue_clock
                FROM {{shares}} s WHERE s.queue_name = qname;
            SELECT JSON_ARRAYAGG(JSON_OBJECT('k', s.k, 'sh', s.id, 'vt', s.vtime,
                    'st', s.started_at, 'v0', s.v0)
                    ORDER BY s.v0, s.started_at IS NOT NULL, s.started_at) AS seen,
                COUNT(*) AS rivals INTO @bgtasks_seen, rivals
            FROM (SELECT k.k, sh.id, sh.vtime, sh.started_at,
                    GREATEST(COALESCE(sh.vtime, queue_clock), queue_clock) AS v0
                FROM JSON_TABLE(@bgtasks_keys, '$[*]' COLUMNS ({_KEY_COLUMNS},
                    p INT PATH '$.p')) k
                LEFT JOIN {{shares}} sh ON sh.queue_name = qname AND sh.fairness_key = k.k
                WHERE k.p = top_priority) s;
            SET @bgtasks_turns = NULL;
            IF rivals > 1 THEN
                SELECT JSON_ARRAYAGG(s.sh ORDER BY s.sh) AS ids INTO @bgtasks_ids
                FROM JSON_TABLE(@bgtasks_seen, '$[*]' COLUMNS (sh BIGINT PATH '$.sh')) s
                WHERE s.sh IS NOT NULL;
                SELECT JSON_ARRAYAGG(JSON_OBJECT('id', l.id, 'vt', l.vtime, 'st', l.started_at))
                    AS fresh INTO @bgtasks_locked FROM (
                    SELECT sh.id, sh.vtime, sh.started_at
                    FROM JSON_TABLE(@bgtasks_ids, '$[*]' COLUMNS (id BIGINT PATH '$')) i
                        STRAIGHT_JOIN {{shares}} sh FORCE INDEX (PRIMARY) ON sh.id = i.id
                    FOR UPDATE) l;
                SELECT JSON_ARRAYAGG(JSON_OBJECT('k', s.k, 'sh', s.sh, 'vt', s.vt, 'st', s.st,
                        'v0', GREATEST(COALESCE(s.vt, queue_clock), queue_clock))
                        ORDER BY GREATEST(COALESCE(s.vt, queue_clock), queue_clock),
                            s.st IS NOT NULL, s.st, s.sh) AS seen INTO @bgtasks_seen
                FROM (SELECT s.k, s.sh, IF(l.id IS NULL, s.vt, l.vt) AS vt,
                        IF(l.id IS NULL, s.st, l.st) AS st
                    FROM JSON_TABLE(@bgtasks_seen, '$[*]' COLUMNS ({_SEEN_COLUMNS})) s
                    LEFT JOIN JSON_TABLE(@bgtasks_locked, '$[*]' COLUMNS (id BIGINT PATH '$.id',
                        vt DOUBLE PATH '$.vt', st DATETIME(6) PATH '$.st')) l ON l.id = s.sh) s;
                SELECT JSON_ARRAYAGG(t.sh) AS turns INTO @bgtasks_turns FROM (
                    SELECT s.sh FROM JSON_TABLE(@bgtasks_seen, '$[*]' COLUMNS (
                        n FOR ORDINALITY, sh BIGINT PATH '$.sh')) s
                    ORDER BY s.n LIMIT %(limit)s) t;
            END IF;
            SELECT JSON_ARRAYAGG(CASE WHEN s.taken THEN JSON_OBJECT('k', s.k, 'sh', s.sh,
                    'v0', s.v0, 'st', s.st, 'fk', rivals > 1) END) AS take
                INTO @bgtasks_take
            FROM (SELECT s.*, rivals = 1 OR s.sh IS NULL
                    OR JSON_CONTAINS(COALESCE(@bgtasks_turns, '[]'), CAST(s.sh AS CHAR)) AS taken
                FROM JSON_TABLE(@bgtasks_seen, '$[*]' COLUMNS ({_SEEN_COLUMNS})) s) s;
            FOR k IN (SELECT k.* FROM JSON_TABLE(@bgtasks_take, '$[*]' COLUMNS ({_KEY_COLUMNS},
                    sh BIGINT PATH '$.sh', v0 DOUBLE PATH '$.v0', st VARCHAR(26) PATH '$.st',
                    fk INT PATH '$.fk')) k WHERE k.k IS NOT NULL) DO
                SET fkey = k.k;
                {_KEYS_TURN};
            END FOR;
        END IF;
    END FOR;
    SELECT JSON_ARRAYAGG(c.seq) AS picked, MAX(c.fl) AS flow, NULL AS claimed_at,
        JSON_ARRAYAGG(CASE WHEN c.fk THEN JSON_OBJECT(
            'seq', c.seq, 'sh', c.sh, 'q', c.q, 'k', c.k, 'c', c.c, 'w', c.w) END) AS fair
    FROM (
        SELECT c.* FROM JSON_TABLE({_CANDS}, '$[*]' COLUMNS (seq BIGINT PATH '$.seq',
            p INT PATH '$.p', f INT PATH '$.f', v DOUBLE PATH '$.v', lt VARCHAR(26) PATH '$.lt',
            fl INT PATH '$.fl', fk INT PATH '$.fk', sh BIGINT PATH '$.sh',
            q {_QUEUE_COLUMN} PATH '$.q', {_KEY_COLUMNS}, c DOUBLE PATH '$.c',
            w INT PATH '$.w')) c
        ORDER BY c.p DESC, c.f, c.v, c.lt IS NOT NULL, c.lt, c.seq
        LIMIT %(limit)s
    ) c INTO {PICKED}, {FLOW_PICKED}, {CLAIMED_AT}, {_FAIR};
    SET {_CANDS} = NULL, @bgtasks_keys = NULL, @bgtasks_take = NULL, @bgtasks_more = NULL,
        @bgtasks_seen = NULL, @bgtasks_ids = NULL, @bgtasks_locked = NULL"""
# Whether a served queue's ready tasks need turns: they have a key, and
# not all of them the same one. Its lowest key (NULL first: a task without
# one) and its highest, a descent of the index each. A lone key's tasks, or
# tasks without a key, start in priority and enqueue order, which is the
# plain pick's: the fair steps would find the same rows at twice the cost
# (a lone key drained at 0.61x of tasks without one, docs/benchmarks.md).
_KEYED = f"""(SELECT NOT (lowest <=> highest) AND highest IS NOT NULL FROM (SELECT
            (SELECT t.fairness_key FROM {{table}} t FORCE INDEX ({_FAIR_INDEX})
                WHERE {_IN_QUEUE} ORDER BY t.fairness_key LIMIT 1) AS lowest,
            (SELECT t.fairness_key FROM {{table}} t FORCE INDEX ({_FAIR_INDEX})
                WHERE {_IN_QUEUE} ORDER BY t.fairness_key DESC LIMIT 1) AS highest) ends)"""
_SERVED = f"{_QUEUE_COLUMN} PATH '$'"
CLAIM_FAIR_PICK = f"""BEGIN NOT ATOMIC
    DECLARE qname TYPE OF {{table}}.queue_name;
    DECLARE fkey TYPE OF {{table}}.fairness_key;
    DECLARE top_priority, rivals INT;
    DECLARE keyed, has_keys, served BOOLEAN DEFAULT FALSE;
    DECLARE queue_clock DOUBLE;
    SET @bgtasks_served = JSON_ARRAY(), {_FAIR} = NULL;
    IF %(all)s THEN
        SET qname = '';
        queue_scan: LOOP
            SELECT MAX(x.queue_name) AS name INTO qname FROM (
                SELECT t.queue_name FROM {{table}} t FORCE INDEX (bgtasks_queued_ready)
                WHERE t.status = '{{ready}}' AND t.queue_name > qname
                ORDER BY t.queue_name LIMIT 1) x;
            IF qname IS NULL THEN
                LEAVE queue_scan;
            END IF;
            SELECT qname NOT IN (SELECT paused.queue_name FROM {{paused}} paused) AS served,
                {_KEYED} AS keyed INTO served, has_keys;
            IF served THEN
                SET keyed = keyed OR has_keys, @bgtasks_served = JSON_ARRAY_APPEND(
                    @bgtasks_served, '$', JSON_OBJECT('n', qname, 'k', has_keys));
            END IF;
        END LOOP queue_scan;
    ELSE
        FOR q IN (SELECT n.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (name {_SERVED})) n
            WHERE n.name NOT IN (SELECT paused.queue_name FROM {{paused}} paused)) DO
            SET qname = q.name;
            SELECT {_KEYED} AS keyed INTO has_keys;
            SET keyed = keyed OR has_keys, @bgtasks_served = JSON_ARRAY_APPEND(
                @bgtasks_served, '$', JSON_OBJECT('n', q.name, 'k', has_keys));
        END FOR;
    END IF;
    IF NOT keyed THEN
        {CLAIM_PICK.strip()};
    ELSE
        SET {_CANDS} = JSON_ARRAY();
        {_FAIR_PICK.strip()};
    END IF;
END"""
# The turns of the keys (of two or more competing) whose tasks the claim
# started, moved on from their next turn by a stride a task; the claim's
# time read here, once, for the rows' start too (CLAIM_WRITE reads it). A
# key without a row of turns (a task enqueued before migration 0028's
# trigger) gets one.
_FAIR_TURNS = f"""BEGIN NOT ATOMIC
    IF {_FAIR} IS NOT NULL THEN
        SET {CLAIMED_AT} = COALESCE({CLAIMED_AT}, {NOW});
        FOR b IN (SELECT f.sh, f.q, f.k, MAX(f.c) AS c,
                COUNT(*) / CAST(MAX(f.w) AS DOUBLE) AS strides
            FROM {PICKED_ROWS} STRAIGHT_JOIN JSON_TABLE({_FAIR}, '$[*]' COLUMNS (
                seq BIGINT PATH '$.seq', sh BIGINT PATH '$.sh', q {_QUEUE_COLUMN} PATH '$.q',
                {_KEY_COLUMNS}, c DOUBLE PATH '$.c', w INT PATH '$.w')) f
                ON f.seq = picked.picked_seq
            GROUP BY f.q, f.k, f.sh) DO
            IF b.sh IS NULL THEN
                INSERT IGNORE INTO {{shares}} (queue_name, fairness_key, vtime, turn, started_at)
                VALUES (b.q, b.k, b.c + b.strides, b.c, {CLAIMED_AT});
            ELSE
                UPDATE {{shares}} SET turn = GREATEST(COALESCE(vtime, b.c), b.c),
                    vtime = GREATEST(COALESCE(vtime, b.c), b.c) + b.strides,
                    started_at = {CLAIMED_AT}
                WHERE id = b.sh;
            END IF;
        END FOR;
        SET {_FAIR} = NULL;
    END IF;
END"""

# The enqueue of any number of tasks, then that of one, which the reader
# (_enqueue) takes when there is one: VALUES from scalar parameters cost the
# server less than an INSERT from JSON_TABLE (docs/benchmarks.md, "Enqueue"),
# and most enqueues are of one task.
_RETURNING = f"\n    RETURNING {enqueued('')}"
_ENQUEUE_ONE = f"""
    INSERT INTO {{table}} ({ENQUEUE_COLUMNS})
    VALUES ({stored_values("%({column})s")})
    {ENQUEUE_HELD}"""


def _row_by_row(query: str) -> str:
    """``query`` with its step ``UPDATE {PICKED_JOIN} SET ...`` run as one
    UPDATE by primary key for each picked row, in a compound statement (one
    step, whose row count is that of all its UPDATEs). A picked row is
    locked, so each matches, as in the join."""
    head = f"UPDATE {PICKED_JOIN}"
    steps = query.split(MYSQL_STEP)
    [at] = [n for n, step in enumerate(steps) if step.strip().startswith(head)]
    assignments = steps[at].strip().removeprefix(head)
    steps[at] = (
        f"BEGIN NOT ATOMIC FOR one IN (SELECT picked_seq FROM {PICKED_ROWS}) DO"
        f" UPDATE {{table}} t FORCE INDEX (PRIMARY) {assignments.strip()}"
        " WHERE t.seq = one.picked_seq; END FOR; END"
    )
    return MYSQL_STEP.join(steps)


# The endings of a finish_many, in a variable: its loop reads the array
# once a row more.
_ENDS = "@bgtasks_ends"


def _ending(key: str, read: str) -> str:
    """``key`` of the ending ``e`` of the loop below, read by ``read``."""
    return f"{read}({_ENDS}, CONCAT('$[', e.n - 1, '].{key}'))"


_FINISH_MANY = MYSQL_STEP.join([
    f"SET {_ENDS} = %(ends)s",
    finish_many_pick(_ENDS),
    f"""BEGIN NOT ATOMIC FOR e IN (SELECT e.n, e.seq, e.status, e.refund, e.delay
        FROM {PICKED_ROWS} STRAIGHT_JOIN {ends_rows(_ENDS)} ON e.seq = picked.picked_seq) DO
        UPDATE {{table}} t FORCE INDEX (PRIMARY)
        {end_set(_ending("return_value", "JSON_VALUE"), _ending("error", "JSON_EXTRACT"))}
        WHERE t.seq = e.seq; END FOR; SET {_ENDS} = NULL; END""",
    FINISHED_READ,
])  # fmt: skip

QUEUE = dataclasses.replace(
    MYSQL_QUEUE,
    claim=_row_by_row(
        MYSQL_STEP.join([CLAIM_FAIR_PICK, _FLOW_WHEN_LIMITED, _FAIR_TURNS, CLAIM_WRITE])
    ),
    recover=_row_by_row(MYSQL_QUEUE.recover),
    give_back=_row_by_row(MYSQL_QUEUE.give_back),
    finish_many=_FINISH_MANY,
    enqueue=MYSQL_STEP.join([ENQUEUE_INSERT + _RETURNING, _ENQUEUE_ONE + _RETURNING]),
)


# JSON's whitespace, which a JSON text may have around its values.
_SPACE = re.compile(r"[ \t\n\r]*")


def _enqueue(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """The INSERT of the tasks of ``params["rows"]`` (``query`` holds that of
    several, then that of one), read by its RETURNING. A held unique key's ON
    DUPLICATE KEY UPDATE makes RETURNING hand back the holder's row, which
    MySQL's read by uuid leaves out: so does this. Without a unique key, no
    row is another's."""
    several, one = query.split(MYSQL_STEP)
    task = _only_task(params["rows"])
    if task is not None:
        own = {column: task.get(column) for column in ONE_TASK_OWN}
        own["args_kwargs"] = json.dumps(own["args_kwargs"])
        rows = read_rows(connection, statement, one, {**params, **own})
    else:
        rows = read_rows(connection, statement, several, params)
    if params["active_key"] is None:
        return rows
    stored = [task] if task is not None else json.loads(params["rows"])
    ours = {each["uuid"] for each in stored}
    return [row for row in rows if row["uuid"] in ours]


def _only_task(rows: str) -> dict[str, Any] | None:
    """The task of the JSON array ``rows`` when it holds one, else ``None``:
    read as far as its first task's end, not through a bulk enqueue's
    thousands (6 % of a bulk enqueue's client CPU, parsed for nothing)."""
    at = _SPACE.match(rows).end()  # type: ignore[union-attr]
    if not rows.startswith("[", at):
        raise ValueError("the rows of an enqueue are a JSON array")
    at = _SPACE.match(rows, at + 1).end()  # type: ignore[union-attr]
    if rows.startswith("]", at):
        return None
    task, end = json.JSONDecoder().raw_decode(rows, at)
    end = _SPACE.match(rows, end).end()  # type: ignore[union-attr]
    return task if rows.startswith("]", end) and not rows[end + 1 :].strip() else None


READERS: dict[str, Reader] = {**MYSQL_READERS, "enqueue": _enqueue}
