"""MySQL's and MariaDB's schema: the SQL django-bgtasks' migrations install
there (the binary collations of names and keys, the history and flow slot
triggers, the queue's indexes), by migration, in :data:`SCHEMA`, run by
:mod:`~django_bgtasks.db.schema`.

Its entries keep :mod:`~django_bgtasks.db.schema`'s rule: each is what a
released migration ran, and is never edited.
"""

from __future__ import annotations

from django_bgtasks.db.driver import Steps

# --- 0006_mysql_storage ------------------------------------------------------------------

_0006_FORWARDS = [
    """
    ALTER TABLE django_bgtasks_backgroundtask
    MODIFY name varchar(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
    """
    ALTER TABLE django_bgtasks_taskrun
    MODIFY name varchar(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    """
    CREATE TRIGGER bgtasks_record_run
    AFTER UPDATE ON django_bgtasks_backgroundtask
    FOR EACH ROW
    BEGIN
        IF OLD.running AND NEW.token <> OLD.token THEN
            INSERT INTO django_bgtasks_taskrun
                (name, token, owner, started_at, finished_at, outcome, error, value,
                `trigger`, attempt, scheduled_for, skipped, result, result_note)
            VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, OLD.updated_at, 'lost',
                CONCAT('lease expired; taken over by ', NEW.owner), OLD.value,
                OLD.`trigger`, OLD.attempt, OLD.scheduled_for, OLD.skipped,
                OLD.result, OLD.result_note)
            ON DUPLICATE KEY UPDATE name = name;
        ELSEIF OLD.running AND NOT NEW.running THEN
            INSERT INTO django_bgtasks_taskrun
                (name, token, owner, started_at, finished_at, outcome, error, value,
                `trigger`, attempt, scheduled_for, skipped, result, result_note)
            VALUES (OLD.name, OLD.token, OLD.owner, OLD.started_at, NEW.finished_at,
                NEW.outcome, NEW.error, NEW.value, OLD.`trigger`, OLD.attempt,
                OLD.scheduled_for, NEW.skipped, NEW.result, NEW.result_note)
            ON DUPLICATE KEY UPDATE name = name;
        END IF;
    END
    """,
]
_0006_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_record_run",
    # Back to the table's default collation.
    "ALTER TABLE django_bgtasks_taskrun MODIFY name varchar(200) NOT NULL",
    "ALTER TABLE django_bgtasks_backgroundtask MODIFY name varchar(200) NOT NULL",
]

# --- 0012_mysql_queue --------------------------------------------------------------------

_0012_FORWARDS = [
    """
    ALTER TABLE django_bgtasks_queuedtask
    MODIFY unique_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY active_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
    """,
    """
    CREATE INDEX bgtasks_queued_claim
    ON django_bgtasks_queuedtask (status, priority DESC, seq)
    """,
]
_0012_BACKWARDS = [
    "DROP INDEX bgtasks_queued_claim ON django_bgtasks_queuedtask",
    # Back to the table's default collation.
    """
    ALTER TABLE django_bgtasks_queuedtask
    MODIFY unique_key varchar(255) NOT NULL,
    MODIFY active_key varchar(255) NULL
    """,
]

# --- 0013_flow_limits --------------------------------------------------------------------

# MySQL has no generate_series and no WHEN on a trigger: a loop, and an IF
# (its UPDATE trigger runs for every update, a heartbeat's too).
_0013_FORWARDS = [
    """
    ALTER TABLE django_bgtasks_queuedtask
    MODIFY concurrency_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    MODIFY rate_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
    """,
    """
    ALTER TABLE django_bgtasks_flowslot
    MODIFY flow_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
    """
    CREATE INDEX bgtasks_flow_slot_started
    ON django_bgtasks_flowslot (kind, flow_key, started_at)
    """,
    """
    CREATE TRIGGER bgtasks_flow_slots_create
    AFTER INSERT ON django_bgtasks_queuedtask FOR EACH ROW
    BEGIN
        DECLARE n INT DEFAULT 1;
        IF NEW.concurrency_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'concurrency'
                AND flow_key = NEW.concurrency_key AND slot = NEW.concurrency
        ) THEN
            WHILE n <= NEW.concurrency DO
                INSERT IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
                VALUES ('concurrency', NEW.concurrency_key, n);
                SET n = n + 1;
            END WHILE;
        END IF;
        SET n = 1;
        IF NEW.rate_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_flowslot WHERE kind = 'rate'
                AND flow_key = NEW.rate_key AND slot = NEW.rate_limit
        ) THEN
            WHILE n <= NEW.rate_limit DO
                INSERT IGNORE INTO django_bgtasks_flowslot (kind, flow_key, slot)
                VALUES ('rate', NEW.rate_key, n);
                SET n = n + 1;
            END WHILE;
        END IF;
    END
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free
    AFTER UPDATE ON django_bgtasks_queuedtask FOR EACH ROW
    BEGIN
        IF OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING'
            AND OLD.concurrency_key IS NOT NULL THEN
            UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
            WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
                AND seq = OLD.seq AND token = OLD.token;
        END IF;
    END
    """,
    """
    CREATE TRIGGER bgtasks_flow_slot_free_deleted
    AFTER DELETE ON django_bgtasks_queuedtask FOR EACH ROW
    BEGIN
        IF OLD.status = 'RUNNING' AND OLD.concurrency_key IS NOT NULL THEN
            UPDATE django_bgtasks_flowslot SET seq = NULL, token = NULL
            WHERE kind = 'concurrency' AND flow_key = OLD.concurrency_key
                AND seq = OLD.seq AND token = OLD.token;
        END IF;
    END
    """,
]
_0013_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free_deleted",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slot_free",
    "DROP TRIGGER IF EXISTS bgtasks_flow_slots_create",
    "DROP INDEX bgtasks_flow_slot_started ON django_bgtasks_flowslot",
]

# --- 0015_pause --------------------------------------------------------------------------

_0015_PAUSED_QUEUE_FORWARDS = [
    """
    ALTER TABLE django_bgtasks_pausedqueue
    MODIFY queue_name varchar(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
]

# --- 0021_queue_list_indexes -------------------------------------------------------------

_0021_FORWARDS = [
    """ALTER TABLE django_bgtasks_queuedtask
            ADD INDEX bgtasks_queued_queue (queue_name, seq),
            ADD INDEX bgtasks_queued_task (task_path, seq),
            ADD INDEX bgtasks_queued_status (status, seq),
            ALGORITHM = INPLACE, LOCK = NONE""",
]
_0021_BACKWARDS = [
    """ALTER TABLE django_bgtasks_queuedtask
            DROP INDEX bgtasks_queued_status,
            DROP INDEX bgtasks_queued_task,
            DROP INDEX bgtasks_queued_queue""",
]

# --- 0027_finished_by_time ---------------------------------------------------------------

_0027_FORWARDS = [
    "CREATE INDEX bgtasks_queued_finished ON django_bgtasks_queuedtask (finished_at)"
]
_0027_BACKWARDS = ["DROP INDEX bgtasks_queued_finished ON django_bgtasks_queuedtask"]

# --- 0028_fair_shares --------------------------------------------------------------------

# The fairness keys compare byte for byte, as 0013 made the flow limits'.
# The ready tasks by queue and key (no partial indexes here: the status
# leads): a queue's tasks without a key (``fairness_key IS NULL``) lie first,
# in the claim's order, so a claim of a queue with a keyed backlog reads its
# unkeyed tasks without reading past the backlog, as in the ready rows'
# index it would; then each key's, in the claim's order, so the claim finds
# a queue's keys by a loose scan (one descent a key) and each key's first
# rows by one descent, a rare key behind 20,000 of another's included
# (db/mysql/mariadb.py's claim).
# A key's row of turns is made when a task of it is enqueued, as 0013 makes
# the flow slots, so that the claims have a row to lock from the key's first
# turn. The consistent read first: a row that exists (most enqueues) is
# not locked by an INSERT IGNORE, which would wait for a claim holding it.
_0028_FORWARDS = [
    """
    ALTER TABLE django_bgtasks_queuedtask
    MODIFY fairness_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
    """,
    """
    ALTER TABLE django_bgtasks_fairshare
    MODIFY fairness_key varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY queue_name varchar(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
    """,
    """
    CREATE INDEX bgtasks_queued_fair
    ON django_bgtasks_queuedtask (status, queue_name, fairness_key, priority DESC, seq)
    """,
    """
    CREATE TRIGGER bgtasks_fair_share_made
    AFTER INSERT ON django_bgtasks_queuedtask FOR EACH ROW
    BEGIN
        IF NEW.fairness_key IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM django_bgtasks_fairshare
            WHERE queue_name = NEW.queue_name AND fairness_key = NEW.fairness_key
        ) THEN
            INSERT IGNORE INTO django_bgtasks_fairshare (queue_name, fairness_key)
            VALUES (NEW.queue_name, NEW.fairness_key);
        END IF;
    END
    """,
]
# (The migration drops the columns after, and the table.)
_0028_BACKWARDS = [
    "DROP TRIGGER IF EXISTS bgtasks_fair_share_made",
    "DROP INDEX bgtasks_queued_fair ON django_bgtasks_queuedtask",
]

# What each migration runs here, by its name; where one migration runs several
# steps of SQL, each is ``<migration>:<step>``.
SCHEMA: dict[str, Steps] = {
    "0006_mysql_storage": Steps(forwards=_0006_FORWARDS, backwards=_0006_BACKWARDS),
    "0012_mysql_queue": Steps(forwards=_0012_FORWARDS, backwards=_0012_BACKWARDS),
    "0013_flow_limits": Steps(forwards=_0013_FORWARDS, backwards=_0013_BACKWARDS),
    "0015_pause:paused_queue": Steps(forwards=_0015_PAUSED_QUEUE_FORWARDS),
    "0021_queue_list_indexes": Steps(forwards=_0021_FORWARDS, backwards=_0021_BACKWARDS),
    "0027_finished_by_time": Steps(forwards=_0027_FORWARDS, backwards=_0027_BACKWARDS),
    "0028_fair_shares": Steps(forwards=_0028_FORWARDS, backwards=_0028_BACKWARDS),
}
