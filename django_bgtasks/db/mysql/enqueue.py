"""MySQL 8.0+ and MariaDB 10.6+: the Django Tasks queue's enqueue (the
backend's ``enqueue()`` and ``enqueue_many()``), the statements and the parts
MariaDB's own are made of (:mod:`~django_bgtasks.db.mysql.mariadb`). The rest
of the queue's statements: :mod:`~django_bgtasks.db.mysql.queue`."""

from __future__ import annotations

from django_bgtasks.db.mysql.leases import MYSQL_STEP
from django_bgtasks.db.shared import ENQUEUE_COLUMNS

# The backend's enqueue (db.shared.ENQUEUE_COLUMNS), in the caller's
# transaction: the INSERT (a key another task holds updates nothing, where
# the other vendors' ON CONFLICT DO NOTHING stores nothing), then a read of
# the rows it stored, by their uuid (the holder's row has another), both in
# one round trip where the connection allows (db/mysql/leases.py's _steps); on
# MariaDB, the INSERT alone with RETURNING (db/mysql/mariadb.py).
_ROWS = (
    "JSON_TABLE(%(rows)s, '$[*]' COLUMNS (n FOR ORDINALITY,"
    " uuid CHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.uuid',"
    " args_kwargs JSON PATH '$.args_kwargs',"
    " concurrency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    " PATH '$.concurrency_key',"
    " rate_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.rate_key',"
    " fairness_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    " PATH '$.fairness_key',"
    " fairness_weight INT PATH '$.fairness_weight')) r"
)


def enqueued(prefix: str) -> str:
    """What the enqueue hands back of each task it stored: its uuid in 32 hex
    digits and its ``enqueued_at`` as text (columns of ``prefix``)."""
    return (
        f"REPLACE({prefix}uuid, '-', '') AS uuid, DATE_FORMAT({prefix}enqueued_at,"
        " '%%Y-%%m-%%d %%H:%%i:%%s.%%f') AS enqueued_at"
    )


# What each task of an enqueue has of its own (db.shared.ENQUEUE_COLUMNS).
ONE_TASK_OWN = (
    "uuid",
    "args_kwargs",
    "concurrency_key",
    "rate_key",
    "fairness_key",
    "fairness_weight",
)


def stored_values(own: str) -> str:
    """The values of one task the enqueue stores, in ENQUEUE_COLUMNS' order:
    ``own`` gives, by name, what each task has of its own (``uuid``,
    ``args_kwargs``, ``concurrency_key``, ``rate_key``, ``fairness_key``,
    ``fairness_weight``); the rest are the
    statement's parameters, alike for every task of it."""
    uuid, args_kwargs, concurrency_key, rate_key, fairness_key, fairness_weight = (
        own.format(column=column) for column in ONE_TASK_OWN
    )
    return f"""{uuid}, %(task_path)s, %(backend)s, %(queue_name)s,
        %(priority)s, %(takes_context)s, {args_kwargs}, %(run_after)s,
        '{{ready}}', 0, %(max_attempts)s, '[]', '[]', '', 0, %(ttl)s, 0, %(unique_key)s,
        %(active_key)s, %(trace_context)s, {concurrency_key}, %(concurrency)s, {rate_key},
        %(rate_limit)s, %(rate_period)s, {fairness_key}, {fairness_weight}"""


ENQUEUE_HELD = "ON DUPLICATE KEY UPDATE active_key = {table}.active_key"
ENQUEUE_INSERT = f"""
    INSERT INTO {{table}} ({ENQUEUE_COLUMNS})
    SELECT {stored_values("r.{column}")}
    FROM {_ROWS}
    ORDER BY r.n
    {ENQUEUE_HELD}"""
ENQUEUE = f"""{ENQUEUE_INSERT}
    {MYSQL_STEP}
    SELECT {enqueued("t.")}
    FROM {_ROWS} STRAIGHT_JOIN {{table}} t ON t.uuid = r.uuid
"""
