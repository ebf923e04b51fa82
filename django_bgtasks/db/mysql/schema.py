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
# (Backwards nothing: the migration drops the columns after.)
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
    "0028_fair_shares": Steps(forwards=_0028_FORWARDS),
}
