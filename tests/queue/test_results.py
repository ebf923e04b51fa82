"""A queued row's ``Task`` and ``TaskResult`` (django_bgtasks/queue/results.py):
the ``Task`` is the declared one with the row's options, made once for each
``Task`` object and options (making one validates it through its backend)."""

from __future__ import annotations

import datetime as dt

import pytest

from django_bgtasks.queue.results import load_task
from tests import djtasks

PATH = "tests.djtasks.add"


def test_a_rows_task_is_the_declared_one_with_the_rows_options() -> None:
    task = load_task(PATH, priority=7, queue_name="default", backend="default", run_after=None)
    assert task.func is djtasks.add.func
    assert (task.priority, task.queue_name, task.backend) == (7, "default", "default")
    after = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert load_task(PATH, run_after=after).run_after == after


def test_the_same_options_give_the_same_task_and_other_options_another() -> None:
    first = load_task(PATH, priority=3)
    assert load_task(PATH, priority=3) is first  # made once, not validated again a row
    other = load_task(PATH, priority=4)
    assert other is not first and other.priority == 4 and first.priority == 3


def test_a_path_that_is_no_task_is_refused() -> None:
    with pytest.raises(TypeError, match="is not a Task"):
        load_task("tests.djtasks.time")
