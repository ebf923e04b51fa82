"""The rules every statement of django-bgtasks keeps, and what all vendors share.

Each lease operation, and each operation of the Django Tasks queue
(``QueuedTask.objects``), is exactly one statement: one round trip, one
commit. Values are always parameters (``%(name)s``). The only text filled in
is the table names, which the caller passes from ``Model._meta.db_table`` and
the connection quotes, the named fragments of each vendor's module
(``{holder}``, ``{stale}``, ...), which are constants, and the queue's
statuses, from ``choices.QueueStatus`` (``{ready}``: plain words).
:mod:`django_bgtasks.db.engines` renders them; one module per vendor
(:mod:`~django_bgtasks.db.postgresql.leases`, :mod:`~django_bgtasks.db.sqlite.leases`,
:mod:`~django_bgtasks.db.mysql.leases`) holds that vendor's statements and quirks.

Rules every statement keeps:

* **Time is the database's.** Staleness, heartbeats and timestamps come from
  ``clock_timestamp()`` on PostgreSQL (``now()`` is frozen at transaction
  start), from ``'now'`` on SQLite and from ``SYSDATE(6)`` on MySQL, never
  from the app server's clock; for a queued task, ``run_after`` too.
* **Fencing.** A holder's write matches ``name``, ``owner`` and, when given,
  ``token``, and needs a live lease: once the heartbeat is older than the ttl
  the lease reads as not running everywhere, and its old holder can no longer
  renew, update or release it, even if nobody has taken it over yet. A queued
  task's row is its own lease while a worker runs it (so that nothing is left
  behind in the lease table when it ends): every holder's write (heartbeat,
  finish) matches the row, its owner *and* its token, and needs status
  ``RUNNING`` and a heartbeat within the ttl. A worker that was paused past
  its ttl, or whose task was recovered meanwhile, writes nothing.
* **Tokens only rise.** A claim sets ``token = token + 1``. A name claimed for
  the first time starts above any token its history holds, so tokens are not
  reused even if a lease row is deleted by hand; a queued task that is
  recovered and claimed again has a higher token than its lost run.
* **History in the same statement.** Ending a run writes its ``TaskRun`` row in
  the statement that ends it: a release, force release or expiry with a
  data-modifying CTE on PostgreSQL, and on SQLite (which has no such CTEs) with
  the trigger of migration 0002 (recreated with more columns by 0004 and
  0005). A claim that takes over a stale lease records
  the run it replaces as ``lost``, as of its last heartbeat, with a trigger on
  both vendors (0002 on SQLite, 0003 on PostgreSQL): only a trigger sees the
  exact row an upsert replaces.
* **Skip what others hold.** On PostgreSQL the queue's claim picks its rows
  with ``FOR UPDATE SKIP LOCKED``: concurrent workers take different rows
  without waiting on each other. SQLite serialises writers, so the same
  ``UPDATE ... WHERE seq IN (SELECT ... LIMIT n)`` is already exclusive there.
  MySQL/MariaDB pick with ``FOR UPDATE SKIP LOCKED`` too, in the transaction
  of the claim's write (:mod:`~django_bgtasks.db.mysql.queue`).
* **Batches keep each row's rules.** A claim takes up to ``limit`` rows in one
  statement, and ``finish_many`` ends several runs in one: each row still gets
  its own token and attempt, and each end is still fenced by its own seq,
  owner, token and live lease; a row that doesn't match is left alone while
  the others are written. A batch's rows travel as one JSON text parameter
  (``jsonb_to_recordset`` on PostgreSQL, ``json_each`` on SQLite,
  ``JSON_TABLE`` on MySQL/MariaDB), so the statement's text is the same for
  every batch size.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from django_bgtasks.choices import FlowLimit, QueueStatus

# The result columns of every statement are read by name (db/rows.py), never by
# position: the names, an alias for every expression, are what the readers rely
# on (tests/db/test_engines.py checks them), and the order is free.

# Every state read; core.states.TaskState.from_row() reads these names.
STATE_COLUMNS = """name, value, running AND NOT stale AS running, owner, token, ttl,
    started_at, finished_at, updated_at, cancel_requested, outcome, error, stale,
    heartbeat_age, requested_at, next_run_at, attempt, trigger, result, result_note,
    paused_at, paused_skipped, scheduled_for"""
# A run's history row, as PostgreSQL's statements that end a run copy it from
# the lease row (db.postgresql's record_ended): not a result. INSERT ... SELECT
# pairs columns by position, so it names this one list on both sides.
RUN_COLUMNS = """name, token, owner, started_at, finished_at, outcome, error, value,
    trigger, attempt, scheduled_for, skipped, result, result_note"""
# The workers' poll; core.states.DueRow.from_row() reads these names.
DUE_COLUMNS = """name, token, running AND NOT stale AS running, stale, attempt, outcome,
    requested_at IS NOT NULL AS requested, schedule, next_run_at, slot_due, finished_age,
    db_now, result_note <> '' AS result_not_stored, paused_at IS NOT NULL AS paused"""
# The workers' list (core.states.WorkerState.from_row()): ``age`` is the seconds
# since the row's last beat by the database's clock, and ``silent`` compares it
# with the ttl the worker stated, so no replica's clock decides that a worker is gone.
WORKER_COLUMNS = (
    "id, host, pid, tasks, concurrency, running, lost, started_at, updated_at, age, ttl, "
    "age > ttl AS silent"
)


@dataclass(frozen=True)
class Statements:
    """One vendor's statements, one field per lease operation."""

    claim: str
    renew: str
    renew_with_value: str
    release: str
    force_release: str
    request_cancel: str
    expire_stale: str
    fence: str
    get_state: str
    list_states: str
    # The workers' (issue: workers): each is one statement, as above.
    request_run: str
    claim_request: str
    claim_scheduled: str
    claim_resume: str
    claim_retry: str
    skip_slot: str
    ensure_schedule: str
    take_slot: str
    due_work: str
    worker_beat: str
    worker_gone: str
    # The Django Tasks recovered from a lost worker, added to its row's list.
    worker_lost: str
    forget_workers: str
    list_workers: str
    clock: str
    # One worker's heartbeat for every lease it holds (RENEW_MANY below).
    renew_many: str
    # An operator's pause of a task, and its unpause (UNPAUSE below).
    pause: str
    unpause: str


# --- One renewal per worker -------------------------------------------------------------
# ``renew_many`` renews every lease one worker holds, background runs (lease
# rows) and Django Tasks (queued rows) alike, in one statement. Its one
# parameter, ``leases``, is the JSON text of :func:`renew_many_param`:
#
#     {"tasks": [{"name": str, "owner": str, "token": int}, ...],
#      "queued": [{"seq": int, "owner": str, "token": int}, ...]}
#
# Each lease is renewed exactly as its own heartbeat renews it: matched by its
# key, owner and token, running, and live by the database's clock (the
# ``holder`` rule of each table), writing ``updated_at`` alone (on
# PostgreSQL a HOT update of the lease table). It returns one row per lease
# still held, of RENEW_MANY_COLUMNS: ``kind`` ("task" or "queued"), ``key``
# (the name, or the seq as text), ``token``, ``cancel_requested`` and ``age``
# (the seconds since the run began, by the database's clock: the lease row's
# ``started_at``, the queued row's ``last_attempted_at``; what a timeout is
# judged by). A lease not in the answer is not held any more: its holder
# gives it up.
RENEW_MANY_COLUMNS = "kind, key, token, cancel_requested, age"
RENEW_TASK = "task"
RENEW_QUEUED = "queued"
# Rendered with the lease statements, which then name the queued table too.
QUEUED_RUNNING = QueueStatus.RUNNING.value


def renew_many_param(tasks: list[tuple[str, str, int]], queued: list[tuple[int, str, int]]) -> str:
    """``renew_many``'s ``leases``: the JSON text of ``tasks`` (name, owner,
    token) and ``queued`` (seq, owner, token), each sorted by its key, so that
    the rows are locked in one order by every statement that locks several."""
    return json.dumps(
        {
            "tasks": [
                {"name": name, "owner": owner, "token": token}
                for name, owner, token in sorted(tasks)
            ],
            "queued": [
                {"seq": seq, "owner": owner, "token": token}
                for seq, owner, token in sorted(queued)
            ],
        },
        separators=(",", ":"),
    )


# --- The workers' statements that the vendors write alike --------------------------------
# (Each vendor's fragments fill in its clock and casts; MySQL writes its own
# claim_resume.)

# Every worker's claim starts nothing of a paused task (``paused_at`` set):
# the request, the resume or the retry stays owed, and is claimed after the
# unpause; a due slot is skipped instead (SKIP_SLOT). The claim hands
# the slots skipped while paused to the run it starts ({claim_set}).

# The request is taken in the claim that performs it: exactly one worker wins.
CLAIM_REQUEST = """
    UPDATE {task}
    SET {claim_set}, attempt = 1, run_args = request, value = NULL, scheduled_for = NULL,
        request = NULL, requested_at = NULL, requested_by = ''
    WHERE name = %(name)s AND requested_at IS NOT NULL AND (NOT running OR {stale})
        AND paused_at IS NULL
    {claim_returning}
"""
# One run per slot: the claim moves the slot on, compare-and-set on the slot
# the worker saw, and only while the database's clock is still before the
# next slot (a worker that stalled after its poll can't run a slot late).
CLAIM_SCHEDULED = """
    UPDATE {task}
    SET {claim_set}, attempt = 1, run_args = NULL, value = NULL,
        scheduled_for = next_run_at, next_run_at = {next_slot}, schedule = %(schedule)s
    WHERE name = %(name)s AND {is_due_slot} AND {before_next} AND (NOT running OR {stale})
        AND paused_at IS NULL
    {claim_returning}
"""
# A lost (stale, or recorded lost) or interrupted run of claim %(expect)s,
# again: with %(resume)s keeping its value for resume_from, else afresh (a
# retry). A graceful interruption does not use up an attempt; a loss does.
# RESUME_OWED is its WHERE, which MySQL's claim_resume (its SET in its order) takes too.
RESUME_OWED = """name = %(name)s AND token = {expect_param}
        AND ((running AND {stale} AND attempt < %(max_attempts)s)
            OR (NOT running AND outcome = %(interrupted)s)
            OR (NOT running AND outcome = %(lost)s AND attempt < %(max_attempts)s))
        AND paused_at IS NULL"""
CLAIM_RESUME = (
    """
    UPDATE {task}
    SET {claim_set},
        attempt = attempt + CASE WHEN NOT running AND outcome = %(interrupted)s
            THEN 0 ELSE 1 END,
        value = CASE WHEN {resume_param} THEN value END
    WHERE """
    + RESUME_OWED
    + """
    {claim_returning}
"""
)
# A failed (or timed-out) run of claim %(expect)s, again, once its delay has passed.
CLAIM_RETRY = """
    UPDATE {task}
    SET {claim_set}, attempt = attempt + 1,
        value = CASE WHEN {resume_param} THEN value END
    WHERE name = %(name)s AND token = {expect_param} AND NOT running
        AND outcome IN (%(failed)s, %(timed_out)s) AND attempt < %(max_attempts)s
        AND {delay_passed}
        AND result_note = '' AND paused_at IS NULL
    {claim_returning}
"""
# The slot came while the task still runs, or while it is paused: move on.
# A skip while a live holder runs it counts on the run (``skipped``); one
# while it is paused and nobody runs it, on the row (``paused_skipped``),
# which the next claim hands to its run. (RETURNING is added by the vendors
# that have it; MySQL counts the rows.)
SKIP_SLOT = """
    UPDATE {task} SET next_run_at = {next_slot}, schedule = %(schedule)s,
        skipped = skipped + CASE WHEN running AND NOT ({stale}) THEN 1 ELSE 0 END,
        paused_skipped = paused_skipped + CASE WHEN running AND NOT ({stale}) THEN 0 ELSE 1 END
    WHERE name = %(name)s AND ((running AND NOT ({stale})) OR paused_at IS NOT NULL)
        AND {is_due_slot} AND {before_next}
"""

# An operator's unpause: what was owed meanwhile is claimed at the next poll.
UNPAUSE = """
    UPDATE {task} SET paused_at = NULL WHERE name = %(name)s AND paused_at IS NOT NULL
"""

# A Django Task schedule's slot (queue/task_schedules.py): the compare-and-set of
# CLAIM_SCHEDULED, on a row that nobody holds, which only keeps the slots;
# the enqueue that goes with it runs in the same transaction. (RETURNING is
# added by the vendors that have it; MySQL counts the rows.)
TAKE_SLOT = """
    UPDATE {task} SET scheduled_for = next_run_at, next_run_at = {next_slot},
        schedule = %(schedule)s
    WHERE name = %(name)s AND {is_due_slot} AND {before_next}
"""


# --- The Django Tasks queue ---------------------------------------------------------------

# What a claim returns; queue.manager.Claim.from_row() reads these names.
CLAIM_COLUMNS = """seq, uuid, task_path, backend, queue_name, priority, takes_context,
    args_kwargs, run_after, enqueued_at, started_at, last_attempted_at, attempts,
    max_attempts, worker_ids, token, ttl, trace_context"""

# What an enqueue inserts, in this order on every vendor (its INSERT ... SELECT
# pairs columns by position). Each row of the one statement is a task of the
# same ``Task``: its scalar parameters are the task's (``task_path``,
# ``backend``, ``queue_name``, ``priority``, ``takes_context``, ``run_after``,
# ``max_attempts``, ``ttl``, ``unique_key``, ``active_key``), and ``rows`` is
# the JSON text of a list of ``{"uuid": <32 hex digits>, "args_kwargs":
# {"args": [...], "kwargs": {...}}}``, one object a task, stored in that order
# (``seq`` rises with it). The other columns are a new task's: ``READY``, no
# attempt, no lease; ``enqueued_at`` is the column's default, the database's
# clock. A row whose ``active_key`` another ready or running task holds is not
# stored (ON CONFLICT DO NOTHING: no error, so no savepoint in the caller's
# transaction). Each row stored is handed back as text, alike on every vendor
# and cheap to read 10,000 times: ``uuid`` in 32 hex digits (as SQLite holds
# it) and ``enqueued_at`` in UTC, "YYYY-MM-DD HH:MM:SS.ffffff" (or fewer
# digits), which the rows of one statement share, so it is parsed once.
# (``trace_context``, a scalar parameter too, is the enqueue's producer span's:
# one for the statement, whatever its number of tasks; django_bgtasks.tracing.)
ENQUEUE_COLUMNS = """uuid, task_path, backend, queue_name, priority, takes_context,
    args_kwargs, run_after, status, attempts, max_attempts, worker_ids, errors, owner,
    token, ttl, cancel_requested, unique_key, active_key, trace_context,
    concurrency_key, concurrency, rate_key, rate_limit, rate_period, fairness_key,
    fairness_weight"""

# A claim takes no task of a paused queue (``{paused}``: the PausedQueue
# table, one row per queue name, whatever the backend alias): the one filter
# every vendor's claim adds to the rows it picks.
NOT_PAUSED = "queue_name NOT IN (SELECT paused.queue_name FROM {paused} paused)"


def ready_probe(pick: str) -> str:
    """An idle worker's poll (``QueuedTask.objects.any_ready``): whether
    ``pick`` (a :func:`queue_pick` of the vendor's claim condition less the
    flow limits, ``LIMIT 1``) finds a row, by a read that locks and writes
    nothing. A claim, even one that finds nothing, is a locking read in a
    write transaction: on MariaDB an empty claim cost the server 8 times this
    (docs/benchmarks.md, "Idle polls")."""
    return f"SELECT EXISTS (SELECT 1 FROM ({pick}) ready_rows) AS ready"


# --- A claim's queues, one at a time --------------------------------------------------
# A claim of named queues reads each apart, from the ready rows' index led
# by the queue name (``bgtasks_queued_ready``), where an equality on the
# queue gives the claim's order: each queue's read stops at the claim's
# limit, whatever the table's size, and a rare queue's rows are found at
# once under another's backlog (read through the index in the claim's order
# across queues, a claim of a queue of 50 tasks behind 300,000 of another
# read all 300,000: 520 ms on MariaDB). PostgreSQL does it in one text with
# LATERAL (db/postgresql/queue.py). MySQL/MariaDB and SQLite have none, so
# their statement holds a pick for every queue and one for the queue
# ``QUEUE_INDEX`` of ``%(queues)s``, between marks, and :func:`with_queues`
# makes it the pick of the claim's queues (``all``, or a number of names)
# when it runs: the one pick, or one pick a queue merged in the claim's
# order. (A statement for each number of queues: a worker names its queues
# once, so it runs one of them.)
_PICK_ALL, _PICK_PART, _PICK_LIMIT, _PICK_END = (
    "/*bgtasks:every-queue*/",
    "/*bgtasks:a-queue*/",
    "/*bgtasks:limit*/",
    "/*bgtasks:end*/",
)
QUEUE_INDEX = "_bgtasks_queue_index_"


def queue_pick(everything: str, one_queue: str, limit: str) -> str:
    """A pick for :func:`with_queues`: ``everything`` the rows of every queue,
    ``one_queue`` those of the queue ``QUEUE_INDEX`` of ``%(queues)s`` (each
    in the claim's order, at most ``limit``, with a ``priority`` and a
    ``seq`` column)."""
    return f"{_PICK_ALL}{everything}{_PICK_PART}{one_queue}{_PICK_LIMIT}{limit}{_PICK_END}"


@functools.lru_cache(maxsize=64)
def with_queues(query: str, count: int | None) -> str:
    """``query`` with its :func:`queue_pick` for every queue (``count``
    ``None``) or ``count`` named ones (none: a pick of the first name, which
    isn't there, so nothing)."""
    head, rest = query.split(_PICK_ALL, 1)
    everything, rest = rest.split(_PICK_PART, 1)
    one_queue, rest = rest.split(_PICK_LIMIT, 1)
    limit, tail = rest.split(_PICK_END, 1)
    if count is None:
        return head + everything + tail
    if count <= 1:
        return head + one_queue.replace(QUEUE_INDEX, "0") + tail
    parts = " UNION ALL ".join(
        f"SELECT * FROM ({one_queue.replace(QUEUE_INDEX, str(n))}) queue_{n}" for n in range(count)
    )
    merged = f"SELECT * FROM ({parts}) queues ORDER BY priority DESC, seq LIMIT {limit}"
    return head + merged + tail


def has_queue_pick(query: str) -> bool:
    """Whether ``query`` holds a :func:`queue_pick` for :func:`with_queues`."""
    return _PICK_ALL in query


# The queue names and task paths there are, each once, in order (the
# admin's filters, the search by task path): a loose scan of the index led
# by the column (migration 0021), one descent a value, where DISTINCT reads
# every row (10,000,000 rows: seconds). The same text on every vendor.
def distinct_values(column: str) -> str:
    """The statement of ``column``'s values (a constant column name)."""
    return f"""
    WITH RECURSIVE found(value) AS (
        SELECT MIN({column}) FROM {{table}}
        UNION ALL
        SELECT (SELECT MIN(t.{column}) FROM {{table}} t WHERE t.{column} > found.value)
        FROM found WHERE found.value IS NOT NULL
    )
    SELECT value FROM found WHERE value IS NOT NULL"""


# An operator's pause and unpause of a queue name, and the paused ones. (A
# pause is an INSERT that a paused name leaves alone: each vendor spells it.)
UNPAUSE_QUEUE = "DELETE FROM {paused} WHERE queue_name = %(queue)s"
PAUSED_QUEUES = "SELECT queue_name, paused_at FROM {paused} ORDER BY queue_name"
# (The flow limits: ``concurrency``, ``rate_limit`` and ``rate_period`` are
# the task's scalar parameters, NULL without that limit; each row of ``rows``
# may hold its own ``concurrency_key`` and ``rate_key``, formed from its
# arguments, and a missing one is NULL.)

# --- Flow limits (``@task(concurrency=N)``, ``@task(rate_limit="N/s")``) --------------
# Decided in the claim, by the database's clock, with slot rows
# (``FlowSlot``, ``{slots}`` in the queue's statements): a concurrency key has
# N rows, each naming the task that holds it (``seq``, ``token``) or nobody
# (``seq`` NULL); a rate key has N rows, each with the time a task last
# started on it. Counting the RUNNING rows of a key in the claim would be
# racy under READ COMMITTED (two claims, each counting before the other
# commits); a slot row is taken by one claim only:
#
# * The claim's candidates are the first ``limit`` ready rows in its order
#   whose keys each have a free slot (by the statement's snapshot: a ready
#   row of a key at its limit is passed over, so it holds back no other
#   key and no unlimited task behind it). A row without keys is tested for
#   nothing more: ``concurrency_key IS NULL OR ...`` is all it pays.
# * Each candidate gets the free slot of its rank among the candidates of its
#   key (the 2nd candidate of a key the 2nd free slot), slots locked ``FOR
#   UPDATE SKIP LOCKED`` and re-checked on their newest version: a slot taken
#   by a claim that committed meanwhile is free no more, and one another
#   claim is taking is skipped. A candidate that gets every slot it needs is
#   claimed, and its slots written in the same statement (a concurrency slot
#   names its seq and new token; a rate slot's ``started_at`` becomes now);
#   one that doesn't stays READY for the next claim. The claim never waits
#   on a lock, so it can't deadlock with another claim or a finish.
# * A concurrency slot is given back by migration 0013's trigger when its
#   task leaves RUNNING (any statement: finish, give back, recover) or is
#   deleted; the statements that end a run need not know of it. The same
#   migration's trigger creates a key's N slots when a task of it is
#   enqueued (none are created once slot N exists).
# * SQLite runs one writer at a time: its claim counts the free slots of each
#   key in the statement and takes as many candidates; triggers take the
#   slots of the rows it claims.
# A limit lowered by a deploy takes effect as the tasks holding the higher
# slots end; raised, the next enqueue creates the new slots.

# The claim's test that the ready row ``t`` may start now, as far as its flow
# limits go (by the statement's snapshot): each key it has has a free slot.
# A row without keys pays for the ``IS NULL`` alone. ``concurrency_free`` is
# the vendor's test that ``t``'s concurrency key has a free slot (``seq``
# NULL) within its limit, ``rate_free`` that ``t``'s rate key has a slot
# whose last start is ``t``'s window ago.
_FLOW_SLOTS_FREE = """(concurrency_key IS NULL OR {concurrency_free})
    AND (rate_key IS NULL OR {rate_free})"""
# The plain form of ``concurrency_free`` (MySQL and MariaDB, which can't
# name ``t`` in a derived table, as PostgreSQL's form does).
CONCURRENCY_SLOT_FREE = """EXISTS (
        SELECT 1 FROM {slots} s
        WHERE s.kind = '{concurrency}' AND s.flow_key = t.concurrency_key
            AND s.slot <= t.concurrency AND s.seq IS NULL)"""


def flow_slots_free(concurrency_free: str, rate_free: str) -> str:
    """The claim's flow test (above), with the vendor's tests."""
    return _FLOW_SLOTS_FREE.format(concurrency_free=concurrency_free, rate_free=rate_free)


# The statuses, as the templates name them: {ready}, {running}, ...
STATUSES = {status.name.lower(): status.value for status in QueueStatus}
# The kinds of flow slot, as the templates name them: {concurrency}, {rate}.
FLOW_KINDS = {kind.name.lower(): kind.value for kind in FlowLimit}

# The error recorded for a run whose worker went silent past its ttl.
LOST_ERROR_CLASS = "django_bgtasks.exceptions.LeaseLost"
CANCELLED_ERROR_CLASS = "django_bgtasks.exceptions.TaskCancelled"


# An operator's retry of a failed task (``QueuedTask.objects.retry``), the
# same on both vendors: ready now (``run_after`` cleared), its finish and
# return value cleared, its errors kept as the history of the runs before,
# and one more attempt when it had used them all. Matched on ``FAILED``, so a
# task in any other state is untouched; the token is left alone (the next
# claim raises it, as always). A unique task is put back only while no other
# run holds its key: the key becomes active again, and the unique index on
# ``active_key`` would refuse a second holder anyway.
def queue_retry(rows: str, returning: str) -> str:
    """The retry of the rows the condition ``rows`` names, each by itself as
    the rule above says, then ``returning``: of one task by its id
    (``QUEUE_RETRY``), or of a list of them (``retry_many``, an operator's
    retry of a filter: operations/bulk.py)."""
    return f"""
    UPDATE {{table}} SET status = '{{ready}}', run_after = NULL, finished_at = NULL,
        return_value = NULL, cancel_requested = false,
        max_attempts = CASE WHEN attempts >= max_attempts THEN attempts + 1
            ELSE max_attempts END,
        active_key = NULLIF(unique_key, '')
    WHERE {rows} AND status = '{{failed}}'
        AND NOT EXISTS (SELECT 1 FROM {{table}} held WHERE held.active_key = {{table}}.unique_key)
    {returning}
"""


QUEUE_RETRY = queue_retry("uuid = %(uuid)s", "RETURNING status")


@dataclass(frozen=True)
class QueueStatements:
    """One vendor's statements of the queue."""

    claim: str
    renew: str
    finish: str
    finish_many: str
    recover: str
    cancel: str
    ended: str
    give_back: str
    retry: str
    # ``cancel`` and ``retry`` of the list of rows ``seqs`` (an operator's
    # bulk action, a batch a statement): ``cancel_many`` returns each row it
    # changed (``seq``, ``status``), ``retry_many`` a row for each it put back.
    cancel_many: str
    retry_many: str
    # The backend's enqueue() and enqueue_many(), in the caller's transaction
    # (ENQUEUE_COLUMNS says what it takes).
    enqueue: str
    # An operator's pause of a queue name, its unpause, and the paused names.
    pause_queue: str
    unpause_queue: str
    paused_queues: str
    # An idle worker's poll, before it claims (shared.ready_probe).
    any_ready: str
    # The queue names and task paths there are (shared.distinct_values).
    queue_names: str
    task_paths: str
    # ``finish_many`` and ``claim`` in one statement (PostgreSQL's); empty
    # where a vendor runs the two one after the other in one transaction
    # (``QueuedTask.objects.finish_and_claim``, ``engines.write_together``).
    finish_claim: str = ""
    # ``claim`` and ``finish_claim`` without the turns: for queues whose
    # ready tasks have no fairness key (``plain_``), or one queue's lone key
    # (``lone_``). PostgreSQL's, where the full claim's size costs time;
    # empty where a vendor has one claim. Each claim of PostgreSQL's names
    # the claim to send next (``next_claim``: plain, lone or full;
    # QueuedTask.objects sends it), and these two return a row at least.
    plain_claim: str = ""
    plain_finish_claim: str = ""
    lone_claim: str = ""
    lone_finish_claim: str = ""
    # What makes the operator's reads of the rest of a transaction read the
    # queue's indexes in their order (PostgreSQL's); empty where a vendor
    # needs nothing (``QueuedTask.objects.index_reads``).
    index_reads: str = ""
