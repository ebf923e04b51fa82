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
    CSLOTS,
    FINISHED_READ,
    FLOW_ASSIGN,
    FLOW_PICKED,
    NOW,
    PICKED_JOIN,
    PICKED_ROWS,
    RSLOTS,
    end_set,
    ends_rows,
    finish_many_pick,
)
from django_bgtasks.db.mysql.queue import QUEUE as MYSQL_QUEUE
from django_bgtasks.db.mysql.queue import READERS as MYSQL_READERS
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import ENQUEUE_COLUMNS


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
    claim=_row_by_row(MYSQL_STEP.join([CLAIM_PICK, _FLOW_WHEN_LIMITED, CLAIM_WRITE])),
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
