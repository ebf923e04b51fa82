"""MySQL 8.0+ and MariaDB 10.6+: the statements of the lease operations and the
workers', and how each one is run and its result read (the rules:
:mod:`django_bgtasks.db.shared`). The Django Tasks queue's, on the same ways,
are :mod:`django_bgtasks.db.mysql.queue`'s.

Neither server has UPDATE ... RETURNING (MySQL has no RETURNING at all;
MariaDB's INSERT ... RETURNING serves the queue's enqueue there), and
Django's MySQL backend counts *matched* rows (CLIENT.FOUND_ROWS), so a write
reports by its row count (a heartbeat's cancel flag too: see renew), and a
claim's token by the LAST_INSERT_ID(expr) idiom. The server sends that value
in the statement's own OK packet (cursor.lastrowid), except that MariaDB sends
0 when the statement fired a trigger, as every UPDATE of the lease table does
(migration 0006). So a claim's UPDATE is sent followed by ``SELECT
LAST_INSERT_ID()`` in the same query (one round trip; mysqlclient allows
several statements per query by default), or, where a site turned that off,
the SELECT right after it on the same connection (nothing can come between).
The values set are never 0, so 0 means "not sent" (an INSERT's reply).
:data:`READERS`, right after the statements, says how each one is run and read.

The clock is SYSDATE(6): the time at execution, with microseconds.
NOW()/UTC_TIMESTAMP() are fixed at statement start, before any lock wait, so
a claim that waited for a fenced row would judge staleness by a clock from
before the wait. SYSDATE() is in the session's time zone, which must be UTC
(the times Django stores; check bgtasks.E011). It needs row-based or mixed
binary logging for replication, and a server started with --sysdate-is-now
makes it NOW() again (check bgtasks.W003).

MySQL assigns SET columns left to right, each seeing the ones before it (as
MariaDB does without SIMULTANEOUS_ASSIGNMENT): a SET that reads a column
comes before the one that changes it. The WHERE sees the row as it was.

Statements of several steps are joined by MYSQL_STEP; their reader says when
the later steps run. History is written by migration 0006's trigger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.rows import Row, matched, named
from django_bgtasks.db.shared import (
    CLAIM_REQUEST,
    CLAIM_RETRY,
    CLAIM_SCHEDULED,
    DUE_COLUMNS,
    # (alike sqlite/leases.py's list on purpose: the statements both take from shared)
    QUEUED_RUNNING,
    RENEW_QUEUED,
    RENEW_TASK,
    RESUME_OWED,
    SKIP_SLOT,
    STATE_COLUMNS,
    TAKE_SLOT,
    UNPAUSE,
    WORKER_COLUMNS,
    Statements,
)
from django_bgtasks.limits import MAX_NAME_LENGTH, MAX_OWNER_LENGTH

MIN_MYSQL_VERSION = (8, 0, 0)  # the oldest of each server still maintained
MIN_MARIADB_VERSION = (10, 6, 0)

MYSQL_STEP = "\n;\n"
_NOW = "SYSDATE(6)"
_TTL = "INTERVAL ROUND(ttl * 1000000) MICROSECOND"


def _names(columns: str) -> str:
    # `trigger` is a reserved word in MySQL.
    return columns.replace("trigger", "`trigger`")


# Alike in sqlite/leases.py on purpose: the same fragments, in each vendor's clock.
FRAGMENTS = {
    "now": _NOW,
    "live": f"updated_at >= {_NOW} - {_TTL}",
    "stale": f"updated_at < {_NOW} - {_TTL}",
    "holder": f"""name = %(name)s AND owner = %(owner)s AND running
        AND (%(token)s IS NULL OR token = %(token)s)
        AND updated_at >= {_NOW} - {_TTL}""",
    "state_columns": _names(STATE_COLUMNS),
    "due_columns": DUE_COLUMNS,
    "worker_columns": WORKER_COLUMNS,
    # The token first: LAST_INSERT_ID(expr) hands it back in the OK packet.
    "claim_set": f"""token = LAST_INSERT_ID(token + 1), running = 1, owner = %(owner)s,
        ttl = %(ttl)s, started_at = {_NOW}, finished_at = NULL, updated_at = {_NOW},
        cancel_requested = 0, outcome = '', error = '', skipped = paused_skipped,
        paused_skipped = 0, `trigger` = %(trigger)s, result = NULL, result_note = ''""",
    "new_row_columns": _names(
        """name, value, running, owner, token, ttl, cancel_requested,
        outcome, error, trigger, attempt, skipped, requested_at, requested_by, request,
        schedule, next_run_at"""
    ),
    "new_row_token": "COALESCE((SELECT MAX(token) FROM {run} WHERE name = %(name)s), 0)",
    # A worker's claim also needs the run's attempt, arguments and value: read
    # in the claim's transaction, right after it (_claim).
    "claim_returning": f"""{MYSQL_STEP}SELECT token, attempt, run_args, value, trace_context
        FROM {{task}}
        WHERE name = %(name)s AND token = LAST_INSERT_ID()""",
    "before_next": f"{_NOW} < %(next)s",
    "is_due_slot": "next_run_at = %(due)s",
    "next_slot": "%(next)s",
    "resume_param": "%(resume)s",
    "expect_param": "%(expect)s",
    "delay_passed": f"""finished_at <= {_NOW}
        - INTERVAL ROUND(%(delay)s * 1000000) MICROSECOND""",
    "state_source": f"""(
        SELECT t.*,
            t.running AND t.updated_at < n.ts - INTERVAL ROUND(t.ttl * 1000000) MICROSECOND
                AS stale,
            TIMESTAMPDIFF(MICROSECOND, t.updated_at, n.ts) / 1000000.0 AS heartbeat_age
        FROM {{task}} t CROSS JOIN (SELECT {_NOW} AS ts) n
    ) s""",
}


# --- How a statement is run, and its result read -----------------------------------------
# Each returns the rows as RETURNING gives them on PostgreSQL and SQLite: by
# column name (db/rows.py), with the names those statements give them.

Reader = Callable[[BaseDatabaseWrapper, str, str, dict[str, Any]], list[Row]]
_ER_DUP_ENTRY = 1062


def read_rows(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """A read: its rows."""
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return named(cursor)


def count_rows(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """A write: one ``matched`` row per matched row (``RETURNING 1 AS matched``)."""
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return matched(cursor.rowcount)


def renew_steps(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """A heartbeat: its ``cancel_requested``, from which step matched, if one did."""
    with connection.cursor() as cursor:
        for cancel_requested, step in enumerate(query.split(MYSQL_STEP)):
            cursor.execute(step, params)
            if cursor.rowcount:
                return [{"cancel_requested": cancel_requested}]
        return []


def _upsert(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """The UPDATE, and only if it matched nothing the INSERT, and if that hits
    a row inserted meanwhile the UPDATE again (each step a compare-and-set in
    autocommit). A claim hands back its ``token``, its LAST_INSERT_ID(expr),
    read in the UPDATE's own query (:func:`_claim_update`); the others a
    ``matched`` row."""
    update, insert = query.split(MYSQL_STEP)
    with connection.cursor() as cursor:
        if statement != "claim":
            cursor.execute(update, params)
            updated = bool(cursor.rowcount)
        else:
            token = _claim_update(connection, cursor, update, params)
            updated = token is not None
        if not updated:
            try:
                cursor.execute(insert, params)
            except IntegrityError as exc:
                if getattr(exc.__cause__, "args", (None,))[0] != _ER_DUP_ENTRY:
                    raise
                if statement != "claim":
                    cursor.execute(update, params)
                    return matched(1) if cursor.rowcount else []
                token = _claim_update(connection, cursor, update, params)
                return [] if token is None else [{"token": token}]
            # An INSERT fires no trigger: its reply carries the token.
            token = _last_insert_id(cursor)
        return [{"token": token}] if statement == "claim" else matched(1)


def _claim(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """A worker's claim and the read of what it claimed: two statements in
    one transaction on this connection."""
    update, select = query.split(MYSQL_STEP)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(update, params)
        if not cursor.rowcount:
            return []
        cursor.execute(select, params)
        return named(cursor)


# A claim's UPDATE and the read of its token, sent as one query (one round
# trip) when the connection allows several statements in one (mysqlclient's
# default, CLIENT.MULTI_STATEMENTS; ``OPTIONS = {"multi_statements": False}``
# turns it off, and then the SELECT is a second round trip).
_CLAIMED_TOKEN = f"{MYSQL_STEP}SELECT LAST_INSERT_ID() AS token"
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
    claimed = cursor.rowcount
    cursor.nextset()
    [row] = named(cursor)
    return int(row["token"]) if claimed else None


def _last_insert_id(cursor: Any) -> int:
    """The LAST_INSERT_ID(expr) the statement just run on ``cursor`` set."""
    if cursor.lastrowid:
        return int(cursor.lastrowid)
    cursor.execute("SELECT LAST_INSERT_ID() AS token")
    [row] = named(cursor)
    return int(row["token"])


# --- One renewal per worker: renew_many (db/shared.py's RENEW_MANY) -----------------------
# Both tables' heartbeats and the read of what they renewed, sent as one query
# (one round trip) where the connection allows several statements in one,
# else one after the other on the connection; each in autocommit, as a
# heartbeat is. With no RETURNING, the read says which rows were renewed: a
# row still held by that owner and token, renewed at or after the SYSDATE(6)
# taken first (a row not renewed here is stale, so older; or taken over,
# with another token). Rows are matched from the JSON by JSON_TABLE (MySQL
# 8.0, MariaDB 10.6), read first (STRAIGHT_JOIN) and each row looked up by
# its primary key (FORCE INDEX): InnoDB locks every row an UPDATE examines,
# so a scan of the table, which the optimizer picks for a small one, would
# wait on any row another transaction holds (a fenced transaction, anyone's).
# Its text columns are utf8mb4_bin, as the name is (a _bin collation wins a
# comparison with the table's own): exact, as a lease's identity is.
_JSON_TEXT = "VARCHAR({}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
_HELD_TASKS = f"""JSON_TABLE(%(leases)s, '$.tasks[*]' COLUMNS (
        name {_JSON_TEXT.format(MAX_NAME_LENGTH)} PATH '$.name',
        owner {_JSON_TEXT.format(MAX_OWNER_LENGTH)} PATH '$.owner',
        token BIGINT PATH '$.token')) h
    STRAIGHT_JOIN {{task}} t FORCE INDEX (PRIMARY)
        ON t.name = h.name AND t.owner = h.owner AND t.token = h.token"""
_HELD_QUEUED = f"""JSON_TABLE(%(leases)s, '$.queued[*]' COLUMNS (
        seq BIGINT PATH '$.seq',
        owner {_JSON_TEXT.format(MAX_OWNER_LENGTH)} PATH '$.owner',
        token BIGINT PATH '$.token')) h
    STRAIGHT_JOIN {{queued}} q FORCE INDEX (PRIMARY)
        ON q.seq = h.seq AND q.owner = h.owner AND q.token = h.token"""
_RENEW_MANY = f"""
    SET @bgtasks_renewing = {_NOW}
    {MYSQL_STEP}
    UPDATE {_HELD_TASKS}
    SET t.updated_at = {_NOW}
    WHERE t.running AND t.updated_at >= {_NOW} - INTERVAL ROUND(t.ttl * 1000000) MICROSECOND
    {MYSQL_STEP}
    UPDATE {_HELD_QUEUED}
    SET q.updated_at = {_NOW}
    WHERE q.status = '{QUEUED_RUNNING}'
        AND q.updated_at >= {_NOW} - INTERVAL ROUND(q.ttl * 1000000) MICROSECOND
    {MYSQL_STEP}
    SELECT '{RENEW_TASK}' AS kind, t.name AS `key`, t.token, t.cancel_requested,
        TIMESTAMPDIFF(MICROSECOND, t.started_at, @bgtasks_renewing) / 1000000 AS age
    FROM {_HELD_TASKS}
    WHERE t.running AND t.updated_at >= @bgtasks_renewing
    UNION ALL
    SELECT '{RENEW_QUEUED}' AS kind, CAST(q.seq AS CHAR) AS `key`, q.token, q.cancel_requested,
        TIMESTAMPDIFF(MICROSECOND, q.last_attempted_at, @bgtasks_renewing) / 1000000 AS age
    FROM {_HELD_QUEUED}
    WHERE q.status = '{QUEUED_RUNNING}' AND q.updated_at >= @bgtasks_renewing
"""


def run_steps(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """Steps in one round trip where allowed: the last one's rows (a read)."""
    with connection.cursor() as cursor:
        if multi_statements(connection):
            cursor.execute(query, params)
            # To the last result set, no further (nextset() reads away the
            # rows of the set it leaves); a later step's error as Django's.
            with connection.wrap_database_errors:
                for _ in range(query.count(MYSQL_STEP)):
                    cursor.nextset()
            return named(cursor)
        for step in query.split(MYSQL_STEP):
            cursor.execute(step, params)
        return named(cursor)


# --- The statements ----------------------------------------------------------------------

STATEMENTS = Statements(
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
    # Alike sqlite/leases.py's release on purpose: the same statement, without RETURNING.
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
        SET request = %(request)s, requested_by = %(requested_by)s, requested_at = {{now}},
            trace_context = %(trace_context)s
        WHERE name = %(name)s AND requested_at IS NULL
        {MYSQL_STEP}
        INSERT INTO {{task}} ({{new_row_columns}}, trace_context)
        VALUES (%(name)s, NULL, 0, '', {{new_row_token}}, %(ttl)s, 0, '', '', '',
            0, 0, {{now}}, %(requested_by)s, %(request)s, '', NULL, %(trace_context)s)
    """,
    claim_request=CLAIM_REQUEST,
    claim_scheduled=CLAIM_SCHEDULED,
    # As CLAIM_RESUME (alike on purpose), with the attempt and value set before {claim_set}
    # changes the columns they read (SET runs left to right here).
    claim_resume=f"""
        UPDATE {{task}}
        SET attempt = attempt + CASE WHEN NOT running AND outcome = %(interrupted)s
                THEN 0 ELSE 1 END,
            value = CASE WHEN {{resume_param}} THEN value END,
            {{claim_set}}
        WHERE {RESUME_OWED} {{claim_returning}}
    """,
    claim_retry=CLAIM_RETRY,
    skip_slot=SKIP_SLOT,  # read by its row count (READERS), as take_slot
    unpause=UNPAUSE,
    pause=f"""
        UPDATE {{task}} SET paused_at = {{now}} WHERE name = %(name)s AND paused_at IS NULL
        {MYSQL_STEP}
        INSERT INTO {{task}} ({{new_row_columns}}, paused_at) VALUES (%(name)s, NULL, 0, '',
            {{new_row_token}}, %(ttl)s, 0, '', '', '', 0, 0, NULL, '', NULL, '', NULL, {{now}})
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
    take_slot=TAKE_SLOT,  # read by its row count (READERS)
    due_work=f"""
        SELECT {{due_columns}} FROM (
            SELECT t.*,
                t.running AND t.updated_at < n.ts - INTERVAL ROUND(t.ttl * 1000000) MICROSECOND
                    AS stale,
                t.next_run_at <= n.ts AS slot_due,
                TIMESTAMPDIFF(MICROSECOND, t.finished_at, n.ts) / 1000000.0 AS finished_age,
                n.ts AS db_now
            FROM {{task}} t CROSS JOIN (SELECT {_NOW} AS ts) n
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
    # NULL: a row written by a worker older than migration 0024.
    worker_lost="""
        UPDATE {worker} SET lost = JSON_MERGE_PRESERVE(COALESCE(lost, '[]'), %(lost)s)
        WHERE id = %(id)s
    """,
    forget_workers=f"""
        DELETE FROM {{worker}}
        WHERE updated_at
            < {_NOW} - INTERVAL ROUND(GREATEST(%(seconds)s, ttl) * 1000000) MICROSECOND
    """,
    list_workers=f"""
        SELECT {{worker_columns}} FROM (
            SELECT w.*, TIMESTAMPDIFF(MICROSECOND, w.updated_at, n.ts) / 1000000.0 AS age
            FROM {{worker}} w CROSS JOIN (SELECT {_NOW} AS ts) n
        ) s
        ORDER BY host, pid
    """,
    clock="SELECT {now} AS db_now",
    renew_many=_RENEW_MANY,
)

# How each statement is run and read (see the readers above).
READERS: dict[str, Reader] = {
    "claim": _upsert,
    "renew": renew_steps,
    "renew_with_value": renew_steps,
    "release": count_rows,
    "force_release": count_rows,
    "request_cancel": count_rows,
    "expire_stale": count_rows,
    "fence": count_rows,
    "get_state": read_rows,
    "list_states": read_rows,
    "request_run": _upsert,
    "claim_request": _claim,
    "claim_scheduled": _claim,
    "claim_resume": _claim,
    "claim_retry": _claim,
    "skip_slot": count_rows,
    "ensure_schedule": _upsert,
    "take_slot": count_rows,
    "due_work": read_rows,
    "worker_beat": _upsert,
    "worker_gone": count_rows,
    "worker_lost": count_rows,
    "forget_workers": count_rows,
    "list_workers": read_rows,
    "clock": read_rows,
    "renew_many": run_steps,
    "pause": _upsert,
    "unpause": count_rows,
}
