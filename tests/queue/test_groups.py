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


class Rounds:
    """A ``run`` that records each batch and the time it began; the first
    statement waits for ``go``."""

    def __init__(self) -> None:
        self.batches: list[tuple[float, list[int]]] = []
        self.started = threading.Event()
        self.go = threading.Event()

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append((time.monotonic(), items))
        self.started.set()
        assert self.go.wait(10)
        return [item * 10 for item in items]


def two_back(group: Group[int, int], rounds: Rounds) -> float:
    """Items 1 and 3 (odd: expected back) in one statement, after a first of
    0; the time that statement ended."""
    first, first_threads = submit_in_threads(group, [0])
    assert rounds.started.wait(10)
    pair, pair_threads = submit_in_threads(group, [1, 3])
    while len(group._pending) < 2:
        time.sleep(0.01)
    rounds.go.set()
    for thread in first_threads + pair_threads:
        thread.join(10)
    assert first == {0: 0} and pair == {1: 10, 3: 30}
    assert [sorted(items) for _, items in rounds.batches] == [[0], [1, 3]]
    return time.monotonic()


def odd(item: int, out: int) -> bool:
    return item % 2 == 1


def test_a_statement_right_after_another_waits_for_the_items_coming_back() -> None:
    """The statement of 1 and 3 expects two items back: the next, of 5
    alone, lingers (up to 60 s) until 7 comes, and carries both."""
    rounds = Rounds()
    group: Group[int, int] = Group(rounds, linger=60.0, comes_back=odd)
    two_back(group, rounds)
    back, back_threads = submit_in_threads(group, [5])
    time.sleep(0.2)
    assert len(rounds.batches) == 2, "5 is lingering for the second item back"
    assert group.submit(7) == 70
    for thread in back_threads:
        thread.join(10)
    assert back == {5: 50}
    assert [sorted(items) for _, items in rounds.batches][2:] == [[5, 7]]


def test_a_statement_lingers_no_longer_than_the_linger() -> None:
    rounds = Rounds()
    group: Group[int, int] = Group(rounds, linger=0.3, comes_back=odd)
    ended = two_back(group, rounds)
    assert group.submit(5) == 50, "nothing else came back: it went alone, the linger over"
    began = rounds.batches[2][0]
    assert began - ended >= 0.3 - 0.01  # (the clock's resolution)
    assert began - ended < 10


def test_no_linger_without_items_coming_back_nor_once_it_is_over() -> None:
    """An item goes at once after a statement whose items don't come back
    (2 and 4: even), with a linger of 60 s; and after one that expects two
    (1 and 3), once its linger (2 s) is over, though only one comes."""
    rounds = Rounds()
    rounds.go.set()
    group: Group[int, int] = Group(rounds, linger=60.0, comes_back=odd)
    assert [group.submit(item) for item in (2, 4)] == [20, 40]
    assert [items for _, items in rounds.batches] == [[2], [4]]
    later = Rounds()
    over: Group[int, int] = Group(later, linger=2.0, comes_back=odd)
    two_back(over, later)
    time.sleep(2.1)
    before = time.monotonic()
    assert over.submit(5) == 50
    assert time.monotonic() - before < 1.5, "it lingered after the linger was over"
