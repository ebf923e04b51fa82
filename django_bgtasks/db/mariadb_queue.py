"""MariaDB's statements of the Django Tasks queue, and their readers, where
they differ from MySQL's (:mod:`~django_bgtasks.db.mysql_queue`, which
MariaDB runs otherwise).

The enqueue is its INSERT alone, ending in RETURNING (10.5+), where MySQL
reads what it stored by a second statement; of one task, an INSERT of its
``VALUES`` (:func:`_enqueue`).

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
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_bgtasks.db.mysql import MYSQL_STEP, Reader
from django_bgtasks.db.mysql import _rows as read_rows
from django_bgtasks.db.mysql_queue import (
    CLAIM_FLOW,
    CLAIM_PICK,
    CLAIM_WRITE,
    ENQUEUE_HELD,
    ENQUEUE_INSERT,
    FLOW_PICKED,
    ONE_TASK_OWN,
    enqueued,
    stored_values,
)
from django_bgtasks.db.mysql_queue import QUEUE as MYSQL_QUEUE
from django_bgtasks.db.mysql_queue import READERS as MYSQL_READERS
from django_bgtasks.db.rows import Row
from django_bgtasks.db.rules import ENQUEUE_COLUMNS

# One step for the readers (db/mysql_queue.py): a compound statement is one
# statement, with one result.
_FLOW_WHEN_LIMITED = (
    f"BEGIN NOT ATOMIC IF {FLOW_PICKED} THEN {'; '.join(step.strip() for step in CLAIM_FLOW)};"
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

QUEUE = dataclasses.replace(
    MYSQL_QUEUE,
    claim=MYSQL_STEP.join([CLAIM_PICK, _FLOW_WHEN_LIMITED, CLAIM_WRITE]),
    enqueue=MYSQL_STEP.join([ENQUEUE_INSERT + _RETURNING, _ENQUEUE_ONE + _RETURNING]),
)


def _enqueue(
    connection: BaseDatabaseWrapper, statement: str, query: str, params: dict[str, Any]
) -> list[Row]:
    """The INSERT of the tasks of ``params["rows"]`` (``query`` holds that of
    several, then that of one), read by its RETURNING. A held unique key's ON
    DUPLICATE KEY UPDATE makes RETURNING hand back the holder's row, which
    MySQL's read by uuid leaves out: so does this. Without a unique key, no
    row is another's."""
    several, one = query.split(MYSQL_STEP)
    stored = json.loads(params["rows"])
    if len(stored) == 1:
        own = {column: stored[0].get(column) for column in ONE_TASK_OWN}
        own["args_kwargs"] = json.dumps(own["args_kwargs"])
        rows = read_rows(connection, statement, one, {**params, **own})
    else:
        rows = read_rows(connection, statement, several, params)
    if params["active_key"] is None:
        return rows
    ours = {row["uuid"] for row in stored}
    return [row for row in rows if row["uuid"] in ours]


READERS: dict[str, Reader] = {**MYSQL_READERS, "enqueue": _enqueue}
