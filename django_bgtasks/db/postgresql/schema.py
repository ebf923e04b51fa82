"""PostgreSQL's schema: the SQL django-bgtasks' migrations install on
PostgreSQL (the lease table's fillfactor, the history, notification and flow
slot triggers and their functions, the queue's partial indexes, built
``CONCURRENTLY`` where a migration is not atomic), by migration, in
:data:`SCHEMA`, run by :mod:`~django_bgtasks.db.schema`.

Its entries keep :mod:`~django_bgtasks.db.schema`'s rule: each is what a
released migration ran, and is never edited.
"""

from __future__ import annotations

from django_bgtasks.db.driver import Steps

# --- 0002_lease_storage ------------------------------------------------------------------

_0002_FORWARDS = [
    # Each lease row is rewritten on every heartbeat, forever. Leaving half of
    # each page free lets the new row version land on the same page, so the
    # update is HOT (no index entry written) and the old version is pruned in
    # place. The table holds one row per task name, so the space is trivial.
    "ALTER TABLE django_bgtasks_backgroundtask SET (fillfactor = 50)",
]
_0002_BACKWARDS = ["ALTER TABLE django_bgtasks_backgroundtask RESET (fillfactor)"]

# --- 0003_postgresql_takeover_trigger ----------------------------------------------------

_0003_FORWARDS = [
    """
    CREATE FUNCTION bgtasks_record_takeover() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value)
        VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, OLD.updated_at, 'lost',
            'lease expired; taken over by ' || NEW.owner, OLD.value)
        ON CONFLICT (name, token) DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
    # UPDATE OF token: heartbeats and updates never set the token, so the
    # trigger isn't even considered for them.
    """
    CREATE TRIGGER bgtasks_record_takeover
    AFTER UPDATE OF token ON django_bgtasks_backgroundtask
    FOR EACH ROW WHEN (OLD.running AND NEW.token <> OLD.token)
    EXECUTE FUNCTION bgtasks_record_takeover()
    """,
]
_0003_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_record_takeover ON django_bgtasks_backgroundtask",
    "DROP FUNCTION IF EXISTS bgtasks_record_takeover()",
]

# --- 0004_workers ------------------------------------------------------------------------

_0004_FORWARDS = [
    """
    CREATE OR REPLACE FUNCTION bgtasks_record_takeover() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value,
             trigger, attempt, scheduled_for, skipped)
        VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, OLD.updated_at, 'lost',
            'lease expired; taken over by ' || NEW.owner, OLD.value,
            OLD.trigger, OLD.attempt, OLD.scheduled_for, OLD.skipped)
        ON CONFLICT (name, token) DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
]
# Backwards, the takeover function of 0003 again (before its columns go).
_0004_BACKWARDS = [
    """
    CREATE OR REPLACE FUNCTION bgtasks_record_takeover() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value)
        VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, OLD.updated_at, 'lost',
            'lease expired; taken over by ' || NEW.owner, OLD.value)
        ON CONFLICT (name, token) DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
]

# --- 0005_results ------------------------------------------------------------------------

_0005_FORWARDS = [
    """
    CREATE OR REPLACE FUNCTION bgtasks_record_takeover() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value,
             trigger, attempt, scheduled_for, skipped, result, result_note)
        VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, OLD.updated_at, 'lost',
            'lease expired; taken over by ' || NEW.owner, OLD.value,
            OLD.trigger, OLD.attempt, OLD.scheduled_for, OLD.skipped,
            OLD.result, OLD.result_note)
        ON CONFLICT (name, token) DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
]
# Backwards, the takeover function of 0004 again (before its columns go).
_0005_BACKWARDS = [
    """
    CREATE OR REPLACE FUNCTION bgtasks_record_takeover() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value,
             trigger, attempt, scheduled_for, skipped)
        VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, OLD.updated_at, 'lost',
            'lease expired; taken over by ' || NEW.owner, OLD.value,
            OLD.trigger, OLD.attempt, OLD.scheduled_for, OLD.skipped)
        ON CONFLICT (name, token) DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
]

# --- 0008_postgresql_change_notifications ------------------------------------------------

_0008_FORWARDS = [
    """
    CREATE FUNCTION bgtasks_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        changed django_bgtasks_backgroundtask;
    BEGIN
        IF TG_OP = 'DELETE' THEN changed := OLD; ELSE changed := NEW; END IF;
        PERFORM pg_notify('bgtasks_changes',
            json_build_object('name', changed.name, 'token', changed.token)::text);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER bgtasks_notify_insert_delete
    AFTER INSERT OR DELETE ON django_bgtasks_backgroundtask
    FOR EACH ROW EXECUTE FUNCTION bgtasks_notify_change()
    """,
    # UPDATE OF every column but updated_at: PostgreSQL decides from the
    # statement's SET list, once, whether the trigger applies, so a heartbeat
    # (SET updated_at) and a fence (SET updated_at = updated_at) don't even
    # consider it, whatever the size of the row's value. (Comparing OLD and
    # NEW per row would cost every heartbeat two conversions of the whole
    # row.) A migration that adds a column to the table must add it here.
    """
    CREATE TRIGGER bgtasks_notify_update
    AFTER UPDATE OF name, value, running, owner, token, ttl, started_at, finished_at,
        cancel_requested, outcome, error, attempt, next_run_at, request, requested_at,
        requested_by, run_args, schedule, scheduled_for, skipped, trigger, result, result_note
    ON django_bgtasks_backgroundtask
    FOR EACH ROW EXECUTE FUNCTION bgtasks_notify_change()
    """,
]
_0008_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_notify_update ON django_bgtasks_backgroundtask",
    "DROP TRIGGER IF EXISTS bgtasks_notify_insert_delete ON django_bgtasks_backgroundtask",
    "DROP FUNCTION IF EXISTS bgtasks_notify_change()",
]

# --- 0009_postgresql_no_pattern_index ----------------------------------------------------

_0009_PATTERN_INDEXES = """
    SELECT index_class.relname
    FROM pg_index i
    JOIN pg_class index_class ON index_class.oid = i.indexrelid
    JOIN pg_opclass opclass ON opclass.oid = ANY(i.indclass::oid[])
    WHERE i.indrelid = %s::regclass
        AND opclass.opcname IN ('varchar_pattern_ops', 'text_pattern_ops')
"""

# --- 0010_postgresql_queue_notifications -------------------------------------------------

_0010_FORWARDS = [
    """
    CREATE FUNCTION bgtasks_notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('bgtasks_queue', json_build_object('queue', NEW.queue_name)::text);
        RETURN NULL;
    END
    $$
    """,
    # UPDATE OF status only: the heartbeat's writes (updated_at, progress)
    # don't even consider the trigger; WHEN keeps it to rows now ready.
    """
    CREATE TRIGGER bgtasks_notify_queue_ready
    AFTER INSERT OR UPDATE OF status ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (NEW.status = 'READY') EXECUTE FUNCTION bgtasks_notify_queue()
    """,
]
_0010_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_notify_queue_ready ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_notify_queue()",
]

# --- 0013_flow_limits --------------------------------------------------------------------

_0013_FORWARDS = [
    # The claim's order, as 0012 gave it to MySQL: the claim reads the ready
    # rows in it and stops at its limit, so a row's flow test runs only on
    # the rows it reads, not on every ready row before a sort.
    """
    CREATE INDEX bgtasks_queued_claim
    ON django_bgtasks_queuedtask (status, priority DESC, seq)
    """,
    # The claim takes a rate key's oldest starts first (never started first).
    """
    CREATE INDEX bgtasks_flow_slot_started
    ON django_bgtasks_flowslot (kind, flow_key, started_at NULLS FIRST)
    """,
    """
    CREATE FUNCTION bgtasks_flow_slots_create() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency
        ) THEN
            INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
            SELECT 'concurrency', NEW.concurrency_key, n
            FROM generate_series(1, NEW.concurrency) n
            ON CONFLICT DO NOTHING;
        END IF;
        IF NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit
        ) THEN
            INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
            SELECT 'rate', NEW.rate_key, n FROM generate_series(1, NEW.rate_limit) n
            ON CONFLICT DO NOTHING;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
    EXECUTE FUNCTION bgtasks_flow_slots_create()
    """,
    """
    CREATE FUNCTION bgtasks_flow_slot_free() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
        WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
            AND seq = OLD.seq AND token = OLD.token;
        RETURN NULL;
    END
    $$
    """,
    # UPDATE OF status only: a heartbeat doesn't even consider it.
    """
    CREATE TRIGGER bgtasks_flow_slot_free
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING'
        AND OLD.concurrency_key IS NOT NULL)
    EXECUTE FUNCTION bgtasks_flow_slot_free()
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free_deleted
    AFTER DELETE ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (OLD.status = 'RUNNING' AND OLD.concurrency_key IS NOT NULL)
    EXECUTE FUNCTION bgtasks_flow_slot_free()
    """,
]
_0013_BACKWARDS = [
    "DROP INDEX IF EXISTS bgtasks_queued_claim",
    "DROP INDEX IF EXISTS bgtasks_flow_slot_started",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free_deleted ON django_bgtasks_queuedtask",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free ON django_bgtasks_queuedtask",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_flow_slot_free()",
    "DROP FUNCTION IF EXISTS bgtasks_flow_slots_create()",
]

# --- 0015_pause --------------------------------------------------------------------------

# PostgreSQL: 0008's change trigger names the columns it watches, so that a
# heartbeat never fires it; the new ones are added (a pause and an unpause
# are announced: the admin's page follows them, and an unpause wakes the
# idle workers of the task, which claim what it owed at once).
_0015_DROP_NOTIFY_UPDATE = (
    "DROP TRIGGER IF EXISTS bgtasks_notify_update ON django_bgtasks_backgroundtask"
)
_0015_FORWARDS = [
    _0015_DROP_NOTIFY_UPDATE,
    """
    CREATE TRIGGER bgtasks_notify_update
    AFTER UPDATE OF name, value, running, owner, token, ttl, started_at, finished_at,
        cancel_requested, outcome, error, attempt, next_run_at, request, requested_at,
        requested_by, run_args, schedule, scheduled_for, skipped, trigger, result, result_note,
        paused_at, paused_skipped
    ON django_bgtasks_backgroundtask
    FOR EACH ROW EXECUTE FUNCTION bgtasks_notify_change()
    """,
]
# 0008's, word for word.
_0015_BACKWARDS = [
    _0015_DROP_NOTIFY_UPDATE,
    """
    CREATE TRIGGER bgtasks_notify_update
    AFTER UPDATE OF name, value, running, owner, token, ttl, started_at, finished_at,
        cancel_requested, outcome, error, attempt, next_run_at, request, requested_at,
        requested_by, run_args, schedule, scheduled_for, skipped, trigger, result, result_note
    ON django_bgtasks_backgroundtask
    FOR EACH ROW EXECUTE FUNCTION bgtasks_notify_change()
    """,
]

# --- 0017_postgresql_partial_queue_indexes -----------------------------------------------

_0017_FORWARDS = [
    "DROP INDEX IF EXISTS bgtasks_queued_claim",
    """CREATE INDEX bgtasks_queued_claim ON django_bgtasks_queuedtask (priority DESC, seq)
        WHERE status = 'READY'""",
    "DROP INDEX IF EXISTS bgtasks_queued_ready",
    """CREATE INDEX bgtasks_queued_ready
        ON django_bgtasks_queuedtask (queue_name, priority DESC, seq)
        WHERE status = 'READY'""",
    "DROP INDEX IF EXISTS bgtasks_queued_running",
    """CREATE INDEX bgtasks_queued_running ON django_bgtasks_queuedtask (owner)
        WHERE status = 'RUNNING'""",
    """CREATE INDEX bgtasks_queued_failed ON django_bgtasks_queuedtask (seq)
        WHERE status = 'FAILED'""",
]
_0017_BACKWARDS = [
    "DROP INDEX IF EXISTS bgtasks_queued_failed",
    "DROP INDEX IF EXISTS bgtasks_queued_running",
    "CREATE INDEX bgtasks_queued_running ON django_bgtasks_queuedtask (status, updated_at)",
    "DROP INDEX IF EXISTS bgtasks_queued_ready",
    """CREATE INDEX bgtasks_queued_ready
        ON django_bgtasks_queuedtask (status, queue_name, priority DESC, seq)""",
    "DROP INDEX IF EXISTS bgtasks_queued_claim",
    "CREATE INDEX bgtasks_queued_claim ON django_bgtasks_queuedtask (status, priority DESC, seq)",
]
# The pattern index's name is Django's hash: found by what it is (as 0009).
# (alike 0009's on purpose: a migration keeps its own SQL)
_0017_PATTERN_INDEXES = """
    SELECT index_class.relname
    FROM pg_index i
    JOIN pg_class index_class ON index_class.oid = i.indexrelid
    JOIN pg_opclass opclass ON opclass.oid = ANY(i.indclass::oid[])
    WHERE i.indrelid = %s::regclass
        AND opclass.opcname IN ('varchar_pattern_ops', 'text_pattern_ops')
"""

# --- 0019_postgresql_claim_by_queue ------------------------------------------------------

_0019_FORWARDS = ["DROP INDEX IF EXISTS bgtasks_queued_claim"]
_0019_BACKWARDS = [
    """CREATE INDEX IF NOT EXISTS bgtasks_queued_claim
        ON django_bgtasks_queuedtask (priority DESC, seq) WHERE status = 'READY'""",
]

# --- 0021_queue_list_indexes -------------------------------------------------------------

_0021_FORWARDS = [
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_queue
            ON django_bgtasks_queuedtask (queue_name, seq)""",
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_task
            ON django_bgtasks_queuedtask (task_path, seq)""",
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_status
            ON django_bgtasks_queuedtask (status, seq)
            WHERE status IN ('SUCCESSFUL', 'FAILED')""",
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_ready_seq
            ON django_bgtasks_queuedtask (seq) WHERE status = 'READY' AND seq > 0""",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_failed",
]
_0021_BACKWARDS = [
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_failed
            ON django_bgtasks_queuedtask (seq) WHERE status = 'FAILED'""",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_ready_seq",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_status",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_task",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_queue",
]

# --- 0022_flow_slots_made_once -----------------------------------------------------------

_0022_FORWARDS = [
    """
    CREATE FUNCTION bgtasks_flow_slots_made() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT EXISTS (
            SELECT FROM bgtasks_inserted
            WHERE concurrency_key IS NOT NULL OR rate_key IS NOT NULL
        ) THEN
            RETURN NULL;
        END IF;
        WITH wanted AS (
            SELECT 'concurrency' AS kind, concurrency_key AS flow_key, concurrency AS slots
            FROM bgtasks_inserted WHERE concurrency_key IS NOT NULL
            UNION
            SELECT 'rate', rate_key, rate_limit
            FROM bgtasks_inserted WHERE rate_key IS NOT NULL
        ), last AS (
            INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
            SELECT kind, flow_key, slots FROM wanted ORDER BY kind, flow_key, slots
            ON CONFLICT DO NOTHING
            RETURNING kind, flow_key, slot
        )
        INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
        SELECT last.kind, last.flow_key, n
        FROM last CROSS JOIN LATERAL generate_series(1, last.slot - 1) n
        ON CONFLICT DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER bgtasks_flow_slots_made
    AFTER INSERT ON django_bgtasks_queuedtask
    REFERENCING NEW TABLE AS bgtasks_inserted
    FOR EACH STATEMENT EXECUTE FUNCTION bgtasks_flow_slots_made()
    """,
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_flow_slots_create()",
]
# 0013's trigger, as it was.
_0022_BACKWARDS = [
    """
    CREATE FUNCTION bgtasks_flow_slots_create() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency
        ) THEN
            INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
            SELECT 'concurrency', NEW.concurrency_key, n
            FROM generate_series(1, NEW.concurrency) n
            ON CONFLICT DO NOTHING;
        END IF;
        IF NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit
        ) THEN
            INSERT INTO django_bgtasks_flowslot (kind, flow_key, slot)
            SELECT 'rate', NEW.rate_key, n FROM generate_series(1, NEW.rate_limit) n
            ON CONFLICT DO NOTHING;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    FOR EACH ROW WHEN (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
    EXECUTE FUNCTION bgtasks_flow_slots_create()
    """,
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_made ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_flow_slots_made()",
]

# --- 0023_postgresql_finished_by_status --------------------------------------------------

_0023_FORWARDS = [
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_succeeded_seq
        ON django_bgtasks_queuedtask (seq) WHERE status = 'SUCCESSFUL'""",
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_failed_seq
        ON django_bgtasks_queuedtask (seq) WHERE status = 'FAILED'""",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_status",
]
_0023_BACKWARDS = [
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_status
        ON django_bgtasks_queuedtask (status, seq)
        WHERE status IN ('SUCCESSFUL', 'FAILED')""",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_failed_seq",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_succeeded_seq",
]

# --- 0025_postgresql_running_by_seq ------------------------------------------------------

_0025_FORWARDS = [
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_running_seq
    ON django_bgtasks_queuedtask (seq) WHERE status = 'RUNNING'"""
]
_0025_BACKWARDS = ["DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_running_seq"]

# --- 0027_finished_by_time ---------------------------------------------------------------

_0027_FORWARDS = [
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_finished
        ON django_bgtasks_queuedtask (finished_at) WHERE finished_at IS NOT NULL"""
]
_0027_BACKWARDS = ["DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_finished"]

# --- 0028_fair_shares --------------------------------------------------------------------

# Two indexes that split the ready tasks: those with a fairness key by queue,
# priority and key (the claim's loose scan of a queue's keys, and each key's
# first rows), and those without one in the claim's order (the claim's scan
# of them in a queue that has keyed ones, which would otherwise read past
# every keyed task in the ready rows' index: a tenant's import of 20,000
# tasks, 20,000 entries a claim).
# Each is made partial by an expression that is NULL unless the row is
# ready (and has a key, or has none), not by ``status = 'READY'``: a
# query that states the expression, and not the status, can't use the ready
# rows' index (whose predicate it does not imply), whatever the statistics.
# With the plain predicates, PostgreSQL read a rare key's rows through the
# ready rows' index, past the 20,000 of another key, when the statistics
# were stale (710 pages a claim of 8). db/postgresql/queue.py's READY_KEY
# and READY_UNKEYED are these expressions, to the letter: a claim that wrote
# them otherwise could not use the indexes (tests/db/postgresql/test_schema.py
# holds the two to each other).
# A key's row of turns is made when a task of it is enqueued, so that the
# claims have a row to lock from the key's first turn (without one, claims at
# once gave the key's first turns all together): once a statement, over its
# inserted rows, as 0022's slots are (a trigger once a row halved the rate of
# enqueue_many() of keyed tasks: 14,700 tasks/s without a key, 6,900 with).
_0028_FORWARDS = [
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_fair
        ON django_bgtasks_queuedtask (queue_name, priority DESC,
            (CASE WHEN status = 'READY' THEN fairness_key END), seq)
        WHERE (CASE WHEN status = 'READY' THEN fairness_key END) IS NOT NULL""",
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS bgtasks_queued_unkeyed
        ON django_bgtasks_queuedtask (queue_name, priority DESC, seq)
        WHERE (CASE WHEN status = 'READY' AND fairness_key IS NULL THEN true END)""",
    """CREATE OR REPLACE FUNCTION bgtasks_fair_shares_made() RETURNS trigger AS $$
    BEGIN
        INSERT INTO django_bgtasks_fairshare (queue_name, fairness_key)
        SELECT DISTINCT queue_name, fairness_key FROM bgtasks_inserted
        WHERE fairness_key IS NOT NULL
        ON CONFLICT (queue_name, fairness_key) DO NOTHING;
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql""",
    "DROP TRIGGER IF EXISTS bgtasks_fair_shares_made ON django_bgtasks_queuedtask",
    """CREATE TRIGGER bgtasks_fair_shares_made
        AFTER INSERT ON django_bgtasks_queuedtask
        REFERENCING NEW TABLE AS bgtasks_inserted
        FOR EACH STATEMENT EXECUTE FUNCTION bgtasks_fair_shares_made()""",
]
_0028_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_fair_shares_made ON django_bgtasks_queuedtask",
    "DROP FUNCTION IF EXISTS bgtasks_fair_shares_made()",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_fair",
    "DROP INDEX CONCURRENTLY IF EXISTS bgtasks_queued_unkeyed",
]

# What each migration runs here, by its name; where one migration runs several
# steps of SQL, each is ``<migration>:<step>``.
SCHEMA: dict[str, Steps] = {
    "0002_lease_storage": Steps(forwards=_0002_FORWARDS, backwards=_0002_BACKWARDS),
    "0003_postgresql_takeover_trigger": Steps(forwards=_0003_FORWARDS, backwards=_0003_BACKWARDS),
    "0004_workers": Steps(forwards=_0004_FORWARDS, backwards=_0004_BACKWARDS),
    "0005_results": Steps(forwards=_0005_FORWARDS, backwards=_0005_BACKWARDS),
    "0008_postgresql_change_notifications": Steps(
        forwards=_0008_FORWARDS, backwards=_0008_BACKWARDS
    ),
    "0009_postgresql_no_pattern_index": Steps(pattern_indexes=_0009_PATTERN_INDEXES),
    "0010_postgresql_queue_notifications": Steps(
        forwards=_0010_FORWARDS, backwards=_0010_BACKWARDS
    ),
    "0013_flow_limits": Steps(forwards=_0013_FORWARDS, backwards=_0013_BACKWARDS),
    "0015_pause": Steps(forwards=_0015_FORWARDS, backwards=_0015_BACKWARDS),
    "0017_postgresql_partial_queue_indexes": Steps(
        forwards=_0017_FORWARDS, backwards=_0017_BACKWARDS, pattern_indexes=_0017_PATTERN_INDEXES
    ),
    "0019_postgresql_claim_by_queue": Steps(forwards=_0019_FORWARDS, backwards=_0019_BACKWARDS),
    "0021_queue_list_indexes": Steps(forwards=_0021_FORWARDS, backwards=_0021_BACKWARDS),
    "0022_flow_slots_made_once": Steps(forwards=_0022_FORWARDS, backwards=_0022_BACKWARDS),
    "0023_postgresql_finished_by_status": Steps(
        forwards=_0023_FORWARDS, backwards=_0023_BACKWARDS
    ),
    "0025_postgresql_running_by_seq": Steps(forwards=_0025_FORWARDS, backwards=_0025_BACKWARDS),
    "0027_finished_by_time": Steps(forwards=_0027_FORWARDS, backwards=_0027_BACKWARDS),
    "0028_fair_shares": Steps(forwards=_0028_FORWARDS, backwards=_0028_BACKWARDS),
}
