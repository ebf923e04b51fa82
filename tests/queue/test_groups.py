"""Group commit (django_bgtasks/queue/groups.py), with threads: an item alone
runs at once; the items that come while a statement is on its way run
together in the next; each thread gets its own item's outcome, or the error."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_bgtasks.queue.groups import Group


class Statements:
    """A ``run`` that records each batch, and holds the first until ``go``."""

    def __init__(self, *, fail: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.started = threading.Event()
        self.go = threading.Event()
        self.fail = fail

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        self.started.set()
        assert self.go.wait(10)
        if self.fail:
            raise ConnectionError(f"lost with {items}")
        return [item * 10 for item in items]


def submit_in_threads(
    group: Group[int, int], items: list[int]
) -> tuple[dict[int, Any], list[Any]]:
    outcomes: dict[int, Any] = {}
    threads = []
    for item in items:

        def submit(item: int = item) -> None:
            try:
                outcomes[item] = group.submit(item)
            except ConnectionError as exc:
                outcomes[item] = exc

        thread = threading.Thread(target=submit)
        thread.start()
        threads.append(thread)
    return outcomes, threads


def test_an_item_alone_runs_at_once() -> None:
    statements = Statements()
    statements.go.set()
    assert Group(statements).submit(4) == 40
    assert statements.batches == [[4]]


def test_the_items_that_come_meanwhile_run_together_in_the_next_statement() -> None:
    statements = Statements()
    group: Group[int, int] = Group(statements)
    first, first_threads = submit_in_threads(group, [1])
    assert statements.started.wait(10)
    later, later_threads = submit_in_threads(group, [2, 3, 4])
    time.sleep(0.2)  # they wait for the statement on its way
    assert statements.batches == [[1]] and later == {}
    statements.go.set()
    for thread in first_threads + later_threads:
        thread.join(10)
    assert first == {1: 10} and later == {2: 20, 3: 30, 4: 40}
    assert len(statements.batches) == 2 and sorted(statements.batches[1]) == [2, 3, 4]


def test_every_item_of_a_failed_statement_gets_the_error_in_its_own_thread() -> None:
    statements = Statements(fail=True)
    group: Group[int, int] = Group(statements)
    first, first_threads = submit_in_threads(group, [1])
    assert statements.started.wait(10)
    later, later_threads = submit_in_threads(group, [2, 3])
    time.sleep(0.2)
    statements.go.set()
    for thread in first_threads + later_threads:
        thread.join(10)
    errors = [first[1], later[2], later[3]]
    assert all(isinstance(error, ConnectionError) for error in errors)
    assert errors[1] is not errors[2], "each thread raises its own"
    assert "[2, 3]" in str(errors[1]) or "[3, 2]" in str(errors[1])
    # The group goes on.
    statements.fail = False
    assert group.submit(5) == 50


def test_a_run_that_returns_too_few_outcomes_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="0 outcomes for 1 items"):
        Group(lambda items: []).submit(1)


def test_a_worker_writes_the_ends_of_runs_that_end_together_in_one_statement(
    tasks_alias: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four threads running tasks of 0.1 s, while each statement of ends takes
    0.1 s more (as on a loaded server): the ends that come meanwhile share
    the next ``finish_and_claim`` (counted as they reach the real one), and
    each run's end is written once, its row as the run returned it."""
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.manager import QueueManager
    from django_bgtasks.worker.loop import Worker
    from tests import djtasks

    sizes: list[int] = []
    finish_and_claim = QueueManager.finish_and_claim

    def counted(self: QueueManager, ends: Any, *args: Any, **kwargs: Any) -> Any:
        if ends:
            sizes.append(len(ends))
            time.sleep(0.1)
        return finish_and_claim(self, ends, *args, **kwargs)

    monkeypatch.setattr(QueueManager, "finish_and_claim", counted)
    record = tmp_path / "record"
    ids = [djtasks.runs_checking.enqueue(str(record), f"k{n}", 0.1).id for n in range(16)]
    Worker([], concurrency=4, poll=0.05, run_queued=True).run(once=True)
    rows = QueuedTask.objects.using(tasks_alias).filter(uuid__in=ids)
    assert {row.status for row in rows} == {"SUCCESSFUL"}
    assert all(row.return_value["token"] == row.token for row in rows)
    assert sum(sizes) == 16 and max(sizes) > 1, sizes
