"""operations/queued.py on every engine: the filters, the keyset pages, the
counts that stop at a cap, the names there are, and ``bgtasks list``'s
groups. (What they read at 10,000,000 rows is benchmarks/scale.py's; that a
claim's reads stay bounded, tests/queue/test_claim_reads.py's.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connections

from django_bgtasks.models import QueuedTask
from django_bgtasks.operations.queued import (
    DEFAULT_PAGE_SIZE,
    QueuedFilter,
    count_capped,
    newest_window,
    page_size,
    queue_names,
    queued_page,
    queued_tasks,
    task_paths,
)
from tests import djtasks


def _enqueue(count: int, *, queue: str = "default", task: object = None) -> list[str]:
    """``count`` tasks of ``task`` (``djtasks.add``) on ``queue``: their ids, in order."""
    chosen = (task or djtasks.add).using(queue_name=queue)  # type: ignore[attr-defined]
    results = chosen.get_backend().enqueue_many(chosen, [((n, 1), {}) for n in range(count)])
    return [str(result.id) for result in results]


def _ids(rows: list[QueuedTask]) -> list[str]:
    return [str(row.uuid) for row in rows]


def test_pages_read_newest_first_by_keyset_without_gaps_or_repeats(tasks_alias: str) -> None:
    ids = _enqueue(23)
    pages, before = [], None
    while True:
        page = queued_page(QueuedFilter(), before=before, limit=10)
        pages.append(_ids(page.rows))
        if page.next_before is None:
            break
        before = page.next_before
        # Tasks enqueued between two pages are newer: no later page shows them.
        _enqueue(2, queue="other")
    assert [len(page) for page in pages] == [10, 10, 3]
    assert [one for page in pages for one in page] == ids[::-1]
    # A page that ends exactly at the last task says there is no next one.
    assert queued_page(QueuedFilter(status="READY"), limit=29).next_before is None


def test_each_filter_narrows_the_list_and_they_combine(tasks_alias: str) -> None:
    default = _enqueue(3)
    other = _enqueue(2, queue="other")
    echoed = _enqueue(2, task=djtasks.echo)
    claimed = QueuedTask.objects.claim("w", queues=["other"])
    assert claimed is not None

    def listed(**filters: str) -> list[str]:
        return _ids(queued_page(QueuedFilter.parse(**filters)).rows)

    assert listed(queue="other") == other[::-1]
    assert listed(task="tests.djtasks.echo") == echoed[::-1]
    assert listed(status="running") == [str(claimed.uuid)]
    assert listed(status="READY", queue="other") == [other[1]]
    assert listed(backend="default", queue="default", task="tests.djtasks.add") == default[::-1]
    assert listed(backend="retrying") == []
    assert listed(queue="none") == []


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"status": "DONE"}, "status must be one of READY, RUNNING, SUCCESSFUL, FAILED"),
        ({"queue": ""}, "queue name must not be blank"),
        ({"queue": "q" * 101}, "queue name must be at most 100 characters"),
        ({"task": " x"}, "task must not start or end with whitespace"),
        ({"backend": "a\nb"}, "backend must not contain control characters"),
    ],
)
def test_a_bad_filter_is_refused_naming_it(filters: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QueuedFilter.parse(**filters)


@pytest.mark.parametrize("limit", [0, 501, "ten", 2.5, True, None])
def test_a_page_size_is_a_whole_number_from_1_to_500(limit: object) -> None:
    with pytest.raises(ValueError, match="limit must be a whole number from 1 to 500"):
        page_size(limit)
    assert page_size("500") == 500


def test_counts_stop_at_their_cap_and_windows_count_the_newest(tasks_alias: str) -> None:
    _enqueue(4)
    _enqueue(3, queue="other")
    tasks = QueuedFilter().tasks()
    exact, capped = count_capped(tasks, cap=7), count_capped(tasks, cap=5)
    assert (exact.value, exact.capped, str(exact)) == (7, False, "7")
    assert (capped.value, capped.capped, str(capped)) == (5, True, "5+")
    window = newest_window(tasks, ["queue_name", "status"], cap=5)
    # The five newest: the three of "other", then two of "default"; each a
    # lower bound of the count in all.
    assert str(window.count("queue_name", "other")) == "3+"
    assert str(window.count("queue_name", "default")) == "2+"
    assert str(window.total()) == "5+"
    whole = newest_window(tasks, ["status"], cap=7)
    assert (str(whole.count("status", "READY")), str(whole.total())) == ("7", "7")


def test_the_names_there_are_each_once_in_order(tasks_alias: str, settings: Any) -> None:
    settings.TASKS = {**settings.TASKS, "default": {**settings.TASKS["default"], "QUEUES": []}}
    assert queue_names() == [] and task_paths() == []
    _enqueue(3, queue="zeta")
    _enqueue(2, queue="alpha", task=djtasks.echo)
    _enqueue(1, queue="Alpha")
    assert task_paths() == ["tests.djtasks.add", "tests.djtasks.echo"]
    names = queue_names()
    # (MariaDB's column compares names without case: one of the two there.)
    assert names in (["Alpha", "alpha", "zeta"], ["Alpha", "zeta"], ["alpha", "zeta"])


def test_the_list_shows_the_running_and_waiting_then_the_newest_finished(
    tasks_alias: str,
) -> None:
    first = _enqueue(3)
    claimed = QueuedTask.objects.claim("w", queues=None)
    assert claimed is not None and str(claimed.uuid) == first[0]
    QueuedTask.objects.cancel(first[1])  # failed without running
    waiting = _enqueue(2, queue="other")
    assert _ids(queued_tasks(limit=3)) == [waiting[1], waiting[0], first[2]]
    assert _ids(queued_tasks()) == [waiting[1], waiting[0], first[2], first[0], first[1]]


def _first_page_read(status: str) -> dict[str, Any]:
    """PostgreSQL's plan of the API's first page of ``status``'s tasks, run
    as the operator's reads run (``EXPLAIN (ANALYZE, BUFFERS)``)."""
    page = QueuedFilter(status=status).tasks()[: DEFAULT_PAGE_SIZE + 1]
    with QueuedTask.objects.index_reads():
        [plan] = json.loads(page.explain(format="json", analyze=True, buffers=True))
    return dict(plan)


def _pages(plan: dict[str, Any]) -> int:
    """The pages a plan's run read, from the cache or not."""
    top = plan["Plan"]
    return int(top["Shared Hit Blocks"] + top.get("Shared Read Blocks", 0))


def _shape(plan: dict[str, Any]) -> str:
    """A plan's nodes, one a line, each with its index, estimated cost, rows
    and pages: what a failed bound shows (a whole plan is cut short)."""

    def lines(node: dict[str, Any], depth: int) -> list[str]:
        pages = node["Shared Hit Blocks"] + node.get("Shared Read Blocks", 0)
        line = (
            f"{'  ' * depth}{node['Node Type']} {node.get('Index Name', '')} "
            f"cost={node['Startup Cost']}..{node['Total Cost']} "
            f"rows={node['Actual Rows']} pages={pages}"
        )
        return [line] + [one for child in node.get("Plans", []) for one in lines(child, depth + 1)]

    return "\n".join(lines(plan["Plan"], 0))


def test_the_newest_ready_tasks_are_read_from_their_index(pg_alias: str) -> None:
    """PostgreSQL's page of ready tasks reads the newest of them from the
    index of the ready rows by seq (``of_status`` states its predicate),
    neither the newer finished rows before them nor every ready row, sorted:
    about a page a row."""
    _enqueue(3_000)
    _enqueue(3_000, queue="other")
    QueuedTask.objects.using(pg_alias).filter(queue_name="other").update(status="SUCCESSFUL")
    plan = _first_page_read("READY")
    assert plan["Plan"]["Actual Rows"] == DEFAULT_PAGE_SIZE + 1
    # A page read for each row, and a few of the index (without the index:
    # 224 and 374 pages, on the embedded server and the machine's). Once, in
    # a CI run, 6,198 pages: a plan whose first node cost 163 before its first
    # row, every entry of the claim's index of the ready rows read and then
    # sorted (the operator's reads have had sorts off since).
    assert _pages(plan) <= DEFAULT_PAGE_SIZE + 1 + 30, _shape(plan)


@pytest.mark.parametrize("status", ["FAILED", "SUCCESSFUL"])
def test_the_newest_finished_tasks_are_read_from_their_statuss_index(
    pg_alias: str, status: str
) -> None:
    """PostgreSQL's page of failed (or succeeded) tasks reads them from the
    index of that status's rows by seq (migration 0023), with the table's
    statistics fresh too. With 0021's index by (status, seq), the planner
    took the primary key, newest first, its statistics saying such rows are
    spread evenly through the table: but the newest rows are the ready ones,
    and it stepped over all of them first."""
    finished = _enqueue(2_000)
    rows = QueuedTask.objects.using(pg_alias)
    rows.filter(uuid__in=finished[::10]).update(status="FAILED")
    rows.filter(uuid__in=finished).exclude(status="FAILED").update(status="SUCCESSFUL")
    # Ready, newer than any finished task, and after them in the table (as a
    # backlog that came after a history: the planner's statistics say the
    # table is in seq order).
    _enqueue(20_000, queue="other")
    with connections[pg_alias].cursor() as cursor:
        cursor.execute(f"ANALYZE {QueuedTask._meta.db_table}")
    plan = _first_page_read(status)
    assert plan["Plan"]["Actual Rows"] == DEFAULT_PAGE_SIZE + 1
    # A page read for each row, and a few of the index. By the primary key,
    # every ready row's page first: 829 and 884 pages for the succeeded
    # tasks, on the embedded server and the machine's. (At this size the
    # planner read the failed ones, a tenth of those, from 0021's index
    # already; at 10,000,000 rows it did not.)
    assert _pages(plan) <= DEFAULT_PAGE_SIZE + 1 + 30, _shape(plan)


def test_the_newest_running_tasks_are_read_from_their_index(pg_alias: str) -> None:
    """PostgreSQL's page of running tasks reads them from the index of the
    running rows by seq (migration 0025). With sorts off, as the operator's
    reads run, and no such index, the planner read the primary key past
    every other row: 3.8-6.1 s at 10,000,000 rows."""
    _enqueue(3_000)
    claimed = QueuedTask.objects.claim_many("w", queues=None, limit=5)
    assert len(claimed) == 5
    plan = _first_page_read("RUNNING")
    assert plan["Plan"]["Actual Rows"] == 5
    # Read from that index (without it: the primary key, every row's page,
    # 98 pages here and every one of 10,000,000 at scale). Not a bound on
    # the pages: on the machine's server (autovacuum off) the index keeps
    # the entries of other tests' running rows, deleted and never vacuumed,
    # and each is a page to visit (48 in a CI run).
    assert "Index Scan bgtasks_queued_running_seq" in _shape(plan), _shape(plan)
