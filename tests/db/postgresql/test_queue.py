"""PostgreSQL's statements of the queue (db/postgresql/queue.py): the claim's
LIMIT written into its text (``with_limit``), a whole number, so that a
connection plans the claim, and a run's end with the next claim, once; and
the claim's plan alike for every shape of its queues and far below the
JIT's threshold, with the statistics stale. (What the claim reads, on every
engine: tests/queue/test_claim_reads.py.)"""

from __future__ import annotations

import re

import pytest
from django.db import connections, transaction
from psycopg.sql import Literal

from django_bgtasks.db import engines
from django_bgtasks.db.postgresql.queue import LIMIT_MARK, with_limit
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.manager import _claim_params
from tests.queue.test_claim_reads import LARGE, LIMIT, RARE, SHAPES, _analyze, _enqueue


@pytest.mark.parametrize(
    ("limit", "error"),
    [
        (0, ValueError),
        (2**31, ValueError),
        (True, TypeError),
        (8.0, TypeError),
        ("8", TypeError),
        ("8 OFFSET 0", TypeError),
    ],
)
def test_a_claims_limit_is_a_whole_number_written_into_its_text(
    limit: object, error: type
) -> None:
    """The one value not sent as a parameter: checked before it is written."""
    claim = f"SELECT seq FROM t LIMIT {LIMIT_MARK} FOR UPDATE SKIP LOCKED"
    assert with_limit(claim, 8) == "SELECT seq FROM t LIMIT 8 FOR UPDATE SKIP LOCKED"
    with pytest.raises(error, match="limit must be"):
        with_limit(claim, limit)


def test_the_queues_claims_are_planned_once_a_connection(pg_direct_alias: str) -> None:
    """PostgreSQL plans a prepared statement afresh at each run unless its
    generic plan costs no more. With the claim's LIMIT a parameter, a generic
    plan assumed a tenth of the table, so every claim was planned again:
    half the server's CPU in a drain. The LIMIT is in the statement's text,
    so after PostgreSQL's five custom plans the claim, and a run's end with
    the next claim, each run the one generic plan. (Their plain forms: the
    queue has no keyed task, queue/manager.py's _NEXT_CLAIM.)"""
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.manager import Ending
    from tests import djtasks

    # A queue of some size: on a handful of rows, a tenth of the table is cheap.
    djtasks.add.get_backend().enqueue_many(djtasks.add, [((1, 2), {})] * 5000)
    with connections[pg_direct_alias].cursor() as cursor:
        cursor.execute(f"ANALYZE {QueuedTask._meta.db_table}")  # as autovacuum would
    claims = [
        claim
        for _ in range(8)
        for claim in QueuedTask.objects.claim_many("w", queues=None, limit=1)
    ]
    for claim in claims:
        end = Ending(claim.seq, claim.owner, claim.token, "SUCCESSFUL", return_value="3")
        written, more = QueuedTask.objects.finish_and_claim([end], "w", queues=None, limit=1)
        assert written and len(more) == 1
    with connections[pg_direct_alias].cursor() as cursor:
        cursor.execute(
            "SELECT statement LIKE '%%finished_at%%', generic_plans, custom_plans"
            " FROM pg_prepared_statements WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%'"
        )
        plans = sorted(cursor.fetchall())
    # The claim, then the ends with a claim: each generic since its sixth run.
    assert [(ends, generic >= 3, custom) for ends, generic, custom in plans] == [
        (False, True, 5),
        (True, True, 5),
    ], plans


# The claim's parameters' types, as the workers' cursor binds them.
PARAM_TYPES = {"all": "boolean", "queues": "text[]", "owner": "text", "ends": "text"}


@pytest.mark.parametrize(
    "statement",
    [
        "claim",
        "finish_claim",
        "plain_claim",
        "plain_finish_claim",
        "lone_claim",
        "lone_finish_claim",
    ],
)
def test_the_claims_plan_is_one_whatever_its_queues_and_far_below_the_jit(
    pg_alias: str, statement: str
) -> None:
    """On PostgreSQL, with the statistics stale, the claim (and a run's end
    with the next claim) plans alike for every queue, one, several or a
    rare one: its custom plans cost about what its generic plan does, so
    the plan cache keeps the generic one and the claim is not planned again
    at each call. And that plan is estimated far below ``jit_above_cost`` (100,000
    by default), where PostgreSQL compiles a statement with its JIT at each
    run. Before, a custom plan folded the queues' parameters (a drain of a
    1,000,000 backlog at 0.67x, planning every call), and either plan was
    estimated at 100,000-110,000, over the threshold (a drain at 0.05x
    behind 10,000,000 finished tasks): docs/benchmarks.md, "A million
    tasks". Prepared here as the workers' cursor prepares it, then planned
    both ways (``plan_cache_mode``), in a transaction rolled back. (At this
    size every estimate is about 1,000, and the old claim's differed by 37
    between its plans; the estimate of the threshold's case, about 21,000
    at 10,000,000 rows now, is benchmarks/scale.py's: the planner counts 10
    queues, each a scan of about 2,000 once the table is large.)"""
    _analyze(pg_alias)
    _enqueue(pg_alias, LARGE, kind="no-limits")
    _enqueue(pg_alias, RARE, kind="no-limits", queue="other")
    connection = connections[pg_alias]
    text = with_limit(getattr(QueuedTask.objects._statements(connection), statement), LIMIT)
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", text)
    costs = []
    with transaction.atomic(using=pg_alias), connection.cursor() as cursor:
        types = ", ".join(PARAM_TYPES[name] for name in names)
        cursor.execute(f"PREPARE bgtasks_claim_plan({types}) AS {numbered}")
        for queues in SHAPES.values():
            params = {
                **engines.encode(connection, _claim_params("w", queues, LIMIT)),
                "ends": "[]",
            }
            # As literals: EXECUTE takes no parameters of its own where the
            # connection binds on the server.
            raw = connection.connection
            args = ", ".join(Literal(params[name]).as_string(raw) for name in names)
            for mode in ("force_generic_plan", "force_custom_plan"):
                cursor.execute(f"SET LOCAL plan_cache_mode = {mode}")
                cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE bgtasks_claim_plan({args})")
                [plan] = cursor.fetchone()[0]
                assert "JIT" not in plan, (queues, mode)
                costs.append(plan["Plan"]["Total Cost"])
        cursor.execute("DEALLOCATE bgtasks_claim_plan")
        transaction.set_rollback(True, using=pg_alias)
    # The plan cache keeps a generic plan that costs no more than the custom
    # ones plus their planning, which it charges at 2.5 a table (about 40).
    assert max(costs) - min(costs) < 10, costs
    # A tenth of the threshold here, since the estimate grows with the
    # table: the full claim's, about 6,100 here, is 27,000 at 10,000,000
    # rows with fresh statistics and 42,000 with stale ones. With its
    # queues of keyed tasks counted from the keys' scan (200 where the
    # served queues are 10), it was 11,000-23,000 here and 135,000-418,000
    # there: JIT-compiled at every claim, 300-400 ms (docs/benchmarks.md,
    # "Fair shares at ten million rows").
    assert max(costs) < 100_000 / 10, costs
