"""SQLite's schema: the SQL django-bgtasks' migrations install on SQLite
(the history, flow slot and fair share triggers, the queue's indexes), by migration, in
:data:`SCHEMA`, run by :mod:`~django_bgtasks.db.schema`.

Its entries keep :mod:`~django_bgtasks.db.schema`'s rule: each is what a
released migration ran, and is never edited.
"""

from __future__ import annotations

from django_bgtasks.db.driver import Steps

# --- 0002_lease_storage ------------------------------------------------------------------

_0002_FORWARDS = [
    # A run ends when a running lease stops running (release, force release,
    # expiry) or is claimed by a new token (takeover of a stale holder, which
    # is recorded as lost as of its last heartbeat).
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE OF running, token ON django_bgtasks_backgroundtask
    WHEN OLD.running AND (NOT NEW.running OR NEW.token <> OLD.token)
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value)
        SELECT OLD.name, OLD.token, OLD.owner, OLD.started_at,
            CASE WHEN NEW.token <> OLD.token THEN OLD.updated_at ELSE NEW.finished_at END,
            CASE WHEN NEW.token <> OLD.token THEN 'lost' ELSE NEW.outcome END,
            CASE WHEN NEW.token <> OLD.token
                THEN 'lease expired; taken over by ' || NEW.owner ELSE NEW.error END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.value ELSE NEW.value END;
    END
    """,
]
_0002_BACKWARDS = ["DROP TRIGGER IF EXISTS bgtasks_record_run"]

# --- 0004_workers ------------------------------------------------------------------------

_0004_FORWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE OF running, token ON django_bgtasks_backgroundtask
    WHEN OLD.running AND (NOT NEW.running OR NEW.token <> OLD.token)
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value,
             trigger, attempt, scheduled_for, skipped)
        SELECT OLD.name, OLD.token, OLD.owner, OLD.started_at,
            CASE WHEN NEW.token <> OLD.token THEN OLD.updated_at ELSE NEW.finished_at END,
            CASE WHEN NEW.token <> OLD.token THEN 'lost' ELSE NEW.outcome END,
            CASE WHEN NEW.token <> OLD.token
                THEN 'lease expired; taken over by ' || NEW.owner ELSE NEW.error END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.value ELSE NEW.value END,
            OLD.trigger, OLD.attempt, OLD.scheduled_for,
            CASE WHEN NEW.token <> OLD.token THEN OLD.skipped ELSE NEW.skipped END;
    END
    """,
]
# Backwards on SQLite, removing the columns rebuilds the table, which drops any
# trigger on it; unapplying to 0003 there leaves history unwritten until 0004 is
# applied again (docs/operations.md says so).
_0004_BACKWARDS = ["DROP TRIGGER IF EXISTS bgtasks_record_run"]

# --- 0005_results ------------------------------------------------------------------------

_0005_FORWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE OF running, token ON django_bgtasks_backgroundtask
    WHEN OLD.running AND (NOT NEW.running OR NEW.token <> OLD.token)
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value,
             trigger, attempt, scheduled_for, skipped, result, result_note)
        SELECT OLD.name, OLD.token, OLD.owner, OLD.started_at,
            CASE WHEN NEW.token <> OLD.token THEN OLD.updated_at ELSE NEW.finished_at END,
            CASE WHEN NEW.token <> OLD.token THEN 'lost' ELSE NEW.outcome END,
            CASE WHEN NEW.token <> OLD.token
                THEN 'lease expired; taken over by ' || NEW.owner ELSE NEW.error END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.value ELSE NEW.value END,
            OLD.trigger, OLD.attempt, OLD.scheduled_for,
            CASE WHEN NEW.token <> OLD.token THEN OLD.skipped ELSE NEW.skipped END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.result ELSE NEW.result END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.result_note ELSE NEW.result_note END;
    END
    """,
]
# Backwards on SQLite, removing the columns rebuilds the table (or refuses to
# drop a column a trigger names), so the trigger goes first; 0004's is created
# again once the columns are gone (``0005_results:restore_0004``).
_0005_BACKWARDS = ["DROP TRIGGER IF EXISTS bgtasks_record_run"]
# 0004's trigger, word for word.
_0005_RESTORE_0004_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE OF running, token ON django_bgtasks_backgroundtask
    WHEN OLD.running AND (NOT NEW.running OR NEW.token <> OLD.token)
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value,
             trigger, attempt, scheduled_for, skipped)
        SELECT OLD.name, OLD.token, OLD.owner, OLD.started_at,
            CASE WHEN NEW.token <> OLD.token THEN OLD.updated_at ELSE NEW.finished_at END,
            CASE WHEN NEW.token <> OLD.token THEN 'lost' ELSE NEW.outcome END,
            CASE WHEN NEW.token <> OLD.token
                THEN 'lease expired; taken over by ' || NEW.owner ELSE NEW.error END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.value ELSE NEW.value END,
            OLD.trigger, OLD.attempt, OLD.scheduled_for,
            CASE WHEN NEW.token <> OLD.token THEN OLD.skipped ELSE NEW.skipped END;
    END
    """,
]

# --- 0013_flow_limits --------------------------------------------------------------------

_0013_FORWARDS = [
    # (Ascending, NULLs sort first on SQLite and MySQL.)
    """
    CREATE INDEX bgtasks_flow_slot_started
    ON django_bgtasks_flowslot (kind, flow_key, started_at)
    """,
    # SQLite has no generate_series (and no WITH inside a trigger): N zeros as
    # a JSON array, whose keys are 0 to N - 1.
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    WHEN NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
        SELECT 'concurrency', NEW.concurrency_key, n.key + 1
        FROM json_each('[' || substr(replace(hex(zeroblob(NEW.concurrency)), '00', '0,'),
            1, 2 * NEW.concurrency - 1) || ']') n
        WHERE NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency);
        INSERT OR IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
        SELECT 'rate', NEW.rate_key, n.key + 1
        FROM json_each('[' || substr(replace(hex(zeroblob(NEW.rate_limit)), '00', '0,'),
            1, 2 * NEW.rate_limit - 1) || ']') n
        WHERE NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit);
    END
    """,
    # The claim's rows: the first free slot of each key (the claim made sure
    # there is one for each row it claims); the same 'now' as the claim's.
    """
    CREATE TRIGGER bgtasks_flow_slots_take
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    WHEN NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING'
        AND (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot
            WHERE kind = 'concurrency' AND flow_key = NEW.concurrency_key
                AND slot <= NEW.concurrency AND seq IS NULL
            ORDER BY slot LIMIT 1);
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token,
            started_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot
            WHERE kind = 'rate' AND flow_key = NEW.rate_key AND slot <= NEW.rate_limit
                AND (started_at IS NULL OR (julianday('now') - julianday(started_at))
                    * 86400.0 >= NEW.rate_period - 0.0005)
            ORDER BY started_at LIMIT 1);
    END
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    WHEN OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING'
        AND OLD.concurrency_key IS NOT NULL
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
        WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
            AND seq = OLD.seq AND token = OLD.token;
    END
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free_deleted
    AFTER DELETE ON django_bgtasks_queuedtask
    WHEN OLD.status = 'RUNNING' AND OLD.concurrency_key IS NOT NULL
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
        WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
            AND seq = OLD.seq AND token = OLD.token;
    END
    """,
]
_0013_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free_deleted",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_take",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create",
    "DROP INDEX IF EXISTS bgtasks_flow_slot_started",
]

# --- 0015_pause --------------------------------------------------------------------------

# 0005's trigger, word for word.
_0015_TRIGGER = [
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE OF running, token ON django_bgtasks_backgroundtask
    WHEN OLD.running AND (NOT NEW.running OR NEW.token <> OLD.token)
    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_taskrun
            (name, token, owner, started_at, finished_at, outcome, error, value,
             trigger, attempt, scheduled_for, skipped, result, result_note)
        SELECT OLD.name, OLD.token, OLD.owner, OLD.started_at,
            CASE WHEN NEW.token <> OLD.token THEN OLD.updated_at ELSE NEW.finished_at END,
            CASE WHEN NEW.token <> OLD.token THEN 'lost' ELSE NEW.outcome END,
            CASE WHEN NEW.token <> OLD.token
                THEN 'lease expired; taken over by ' || NEW.owner ELSE NEW.error END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.value ELSE NEW.value END,
            OLD.trigger, OLD.attempt, OLD.scheduled_for,
            CASE WHEN NEW.token <> OLD.token THEN OLD.skipped ELSE NEW.skipped END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.result ELSE NEW.result END,
            CASE WHEN NEW.token <> OLD.token THEN OLD.result_note ELSE NEW.result_note END;
    END
    """,
]
_0015_DROP = ["DROP TRIGGER IF EXISTS bgtasks_record_run"]

# --- 0018_sqlite_claim_index -------------------------------------------------------------

_0018_FORWARDS = [
    """CREATE INDEX bgtasks_queued_claim
    ON django_bgtasks_queuedtask (status, priority DESC, seq)"""
]
_0018_BACKWARDS = ["DROP INDEX IF EXISTS bgtasks_queued_claim"]

# --- 0020_sqlite_flow_slot_take ----------------------------------------------------------

# 0013's trigger, reading the slots from their indexes (written out in
# full, as a migration's SQL is: twice).
_0020_FORWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_take",
    """
    CREATE TRIGGER bgtasks_flow_slots_take
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    WHEN NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING'
        AND (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot INDEXED BY bgtasks_flow_slot_holder
            WHERE kind = 'concurrency' AND flow_key = NEW.concurrency_key
                AND seq IS NULL AND slot <= NEW.concurrency
            LIMIT 1);
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token,
            started_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot INDEXED BY bgtasks_flow_slot_started
            WHERE kind = 'rate' AND flow_key = NEW.rate_key AND slot <= NEW.rate_limit
                AND (started_at IS NULL OR (julianday('now') - julianday(started_at))
                    * 86400.0 >= NEW.rate_period - 0.0005)
            ORDER BY started_at LIMIT 1);
    END
    """,
]
# 0013's, as it was.
_0020_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_take",
    """
    CREATE TRIGGER bgtasks_flow_slots_take
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    WHEN NEW.status = 'RUNNING' AND OLD.status <> 'RUNNING'
        AND (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
    BEGIN
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot
            WHERE kind = 'concurrency' AND flow_key = NEW.concurrency_key
                AND slot <= NEW.concurrency AND seq IS NULL
            ORDER BY slot LIMIT 1);
        UPDATE django_bgtasks_flowslot SET seq = NEW.seq, token = NEW.token,
            started_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
        WHERE id = (
            SELECT id FROM django_bgtasks_flowslot
            WHERE kind = 'rate' AND flow_key = NEW.rate_key AND slot <= NEW.rate_limit
                AND (started_at IS NULL OR (julianday('now') - julianday(started_at))
                    * 86400.0 >= NEW.rate_period - 0.0005)
            ORDER BY started_at LIMIT 1);
    END
    """,
]

# --- 0021_queue_list_indexes -------------------------------------------------------------

_0021_FORWARDS = [
    "CREATE INDEX bgtasks_queued_queue ON django_bgtasks_queuedtask (queue_name, seq)",
    "CREATE INDEX bgtasks_queued_task ON django_bgtasks_queuedtask (task_path, seq)",
    "CREATE INDEX bgtasks_queued_status ON django_bgtasks_queuedtask (status, seq)",
]
_0021_BACKWARDS = [
    "DROP INDEX IF EXISTS bgtasks_queued_status",
    "DROP INDEX IF EXISTS bgtasks_queued_task",
    "DROP INDEX IF EXISTS bgtasks_queued_queue",
]

# --- 0022_flow_slots_made_once -----------------------------------------------------------

# SQLite has no statement triggers: 0013's trigger, the same body, now run
# only when a key of the row lacks its slot N. 0013's ran its body for every
# row with a key, and SQLite built each limit's JSON array of N numbers
# before the look-up that found the slots there: 1.1 ms a row for two keys
# of 10,000 slots (about 700 tasks a second, against 16,000 without limits).
# The trigger's body, both ways: insert the slots of each key of the row
# that lacks its slot N (the WHEN, which differs, says when it runs).
_0022_TRIGGER_BODY = """    BEGIN
        INSERT OR IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
        SELECT 'concurrency', NEW.concurrency_key, n.key + 1
        FROM json_each('[' || substr(replace(hex(zeroblob(NEW.concurrency)), '00', '0,'),
            1, 2 * NEW.concurrency - 1) || ']') n
        WHERE NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency);
        INSERT OR IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
        SELECT 'rate', NEW.rate_key, n.key + 1
        FROM json_each('[' || substr(replace(hex(zeroblob(NEW.rate_limit)), '00', '0,'),
            1, 2 * NEW.rate_limit - 1) || ']') n
        WHERE NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit);
    END
"""
_0022_FORWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create",
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    WHEN (NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency))
        OR (NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit))
"""
    + _0022_TRIGGER_BODY
    + "    ",
]
# 0013's, as it was.
_0022_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create",
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask
    WHEN NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL
"""
    + _0022_TRIGGER_BODY
    + "    ",
]

# --- 0027_finished_by_time ---------------------------------------------------------------

_0027_FORWARDS = [
    """CREATE INDEX IF NOT EXISTS bgtasks_queued_finished
        ON django_bgtasks_queuedtask (finished_at) WHERE finished_at IS NOT NULL"""
]
_0027_BACKWARDS = ["DROP INDEX IF EXISTS bgtasks_queued_finished"]

# --- 0028_fair_shares --------------------------------------------------------------------

# Two indexes that split the ready tasks, as PostgreSQL's 0028 does: those
# with a fairness key by queue, priority and key (the claim's loose scan of
# a queue's keys, one descent a key, and each key's first rows), and those
# without one in the claim's order (its scan of them in a queue that has
# keyed ones, which in the ready rows' index would read past every keyed
# task: a tenant's import of 20,000 tasks, 20,000 entries a claim). The
# claim names each (INDEXED BY) and states its WHERE.
# The trigger keeps the turns of the claim's keyed rows, one row at a time
# (SQLite runs one statement a claim; an UPDATE can't write a second table):
# each start moves its key's next turn on by one over its weight, from the
# key's next turn or the queue's clock (the latest turn given, the greatest
# ``turn`` of the queue's keys), whichever is later, as the claim counted
# them. The clock leaves out the turns this claim gave (``started_at`` is
# the claim's 'now', one value through the statement and its triggers):
# raised by the rows updated before, it would start a key whose next turn
# came earlier at a later one, which would lose turns. A key's second row in
# the claim goes on from its first (its ``started_at`` is now). (Two claims
# within one millisecond share a 'now': the second leaves the first's turns
# out of its clock too, and a key the first started goes on from its next
# turn; at worst a key back from idle then starts a turn early.) An upsert,
# so a key's row is made at its first start, with no trigger on the enqueue.
_0028_FORWARDS = [
    """CREATE INDEX IF NOT EXISTS bgtasks_queued_fair
        ON django_bgtasks_queuedtask (queue_name, priority DESC, fairness_key, seq)
        WHERE status = 'READY' AND fairness_key IS NOT NULL""",
    """CREATE INDEX IF NOT EXISTS bgtasks_queued_unkeyed
        ON django_bgtasks_queuedtask (queue_name, priority DESC, seq)
        WHERE status = 'READY' AND fairness_key IS NULL""",
    "DROP TRIGGER IF EXISTS bgtasks_fair_share_start",
    """
    CREATE TRIGGER bgtasks_fair_share_start
    AFTER UPDATE OF status ON django_bgtasks_queuedtask
    WHEN NEW.status = 'RUNNING' AND OLD.status = 'READY' AND NEW.fairness_key IS NOT NULL
    BEGIN
        INSERT INTO django_bgtasks_fairshare (queue_name, fairness_key, vtime, turn, started_at)
        SELECT NEW.queue_name, NEW.fairness_key,
            c.clock + 1.0 / COALESCE(NEW.fairness_weight, 1), c.clock,
            strftime('%Y-%m-%d %H:%M:%f', 'now')
        FROM (
            SELECT COALESCE(max(s.turn), 0) AS clock
            FROM django_bgtasks_fairshare s INDEXED BY bgtasks_fair_share_turn
            WHERE s.queue_name = NEW.queue_name
                AND s.started_at IS NOT strftime('%Y-%m-%d %H:%M:%f', 'now')
        ) c
        WHERE true
        ON CONFLICT (queue_name, fairness_key) DO UPDATE SET
            vtime = CASE WHEN started_at IS excluded.started_at THEN vtime
                ELSE max(COALESCE(vtime, excluded.turn), excluded.turn) END
                + 1.0 / COALESCE(NEW.fairness_weight, 1),
            turn = CASE WHEN started_at IS excluded.started_at THEN vtime
                ELSE max(COALESCE(vtime, excluded.turn), excluded.turn) END,
            started_at = excluded.started_at;
    END
    """,
]
_0028_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_fair_share_start",
    "DROP INDEX IF EXISTS bgtasks_queued_fair",
    "DROP INDEX IF EXISTS bgtasks_queued_unkeyed",
]

# What each migration runs here, by its name; where one migration runs several
# steps of SQL, each is ``<migration>:<step>``.
SCHEMA: dict[str, Steps] = {
    "0002_lease_storage": Steps(forwards=_0002_FORWARDS, backwards=_0002_BACKWARDS),
    "0004_workers": Steps(forwards=_0004_FORWARDS, backwards=_0004_BACKWARDS),
    "0005_results": Steps(forwards=_0005_FORWARDS, backwards=_0005_BACKWARDS),
    # Backwards, after the columns are gone: 0004's trigger again.
    "0005_results:restore_0004": Steps(backwards=_0005_RESTORE_0004_BACKWARDS),
    "0013_flow_limits": Steps(forwards=_0013_FORWARDS, backwards=_0013_BACKWARDS),
    # Backwards, after the columns are gone: 0005's trigger again.
    "0015_pause:restore_0005": Steps(backwards=_0015_TRIGGER),
    "0015_pause": Steps(forwards=_0015_TRIGGER, backwards=_0015_DROP),
    "0018_sqlite_claim_index": Steps(forwards=_0018_FORWARDS, backwards=_0018_BACKWARDS),
    "0020_sqlite_flow_slot_take": Steps(forwards=_0020_FORWARDS, backwards=_0020_BACKWARDS),
    "0021_queue_list_indexes": Steps(forwards=_0021_FORWARDS, backwards=_0021_BACKWARDS),
    "0022_flow_slots_made_once": Steps(forwards=_0022_FORWARDS, backwards=_0022_BACKWARDS),
    "0027_finished_by_time": Steps(forwards=_0027_FORWARDS, backwards=_0027_BACKWARDS),
    "0028_fair_shares": Steps(forwards=_0028_FORWARDS, backwards=_0028_BACKWARDS),
}
