"""MariaDB's statements of the Django Tasks queue, where they differ from
MySQL's (:mod:`~django_bgtasks.db.mysql_queue`, which MariaDB runs otherwise).

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

from django_bgtasks.db.mysql import MYSQL_STEP
from django_bgtasks.db.mysql_queue import CLAIM_FLOW, CLAIM_PICK, CLAIM_WRITE, FLOW_PICKED
from django_bgtasks.db.mysql_queue import QUEUE as MYSQL_QUEUE

# One step for the readers (db/mysql_queue.py): a compound statement is one
# statement, with one result.
_FLOW_WHEN_LIMITED = (
    f"BEGIN NOT ATOMIC IF {FLOW_PICKED} THEN {'; '.join(step.strip() for step in CLAIM_FLOW)};"
    " END IF; END"
)

QUEUE = dataclasses.replace(
    MYSQL_QUEUE, claim=MYSQL_STEP.join([CLAIM_PICK, _FLOW_WHEN_LIMITED, CLAIM_WRITE])
)
