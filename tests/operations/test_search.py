"""operations/search.py's terms on every engine, through QueuedFilter and
queued_page as each surface reads them: arguments, error text, flow key,
time range, the retrying tasks apart from the failed for good; and a scan
that stops at its budget answers with where to go on."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.utils import timezone

from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import search
from django_bgtasks.operations.queued import QueuedFilter, queued_page
from tests import djtasks


def _ids(filters: QueuedFilter, limit: int = 100) -> list[str]:
    return [str(row.uuid) for row in queued_page(filters, limit=limit).rows]


def _echo(*args: Any, **kwargs: Any) -> str:
    return str(djtasks.echo.enqueue(*args, **kwargs).id)


def test_args_match_keyword_and_positional_values(tasks_alias: str) -> None:
    alice = _echo(5, "x", user_id=5, name="alice")
    bob = _echo(15, user_id=50, name="bob", tags=["a", "b"])
    nothing = _echo()
    assert _ids(QueuedFilter.parse(args='{"user_id": 5}')) == [alice]
    assert _ids(QueuedFilter.parse(args='{"name": "bob"}')) == [bob]
    assert _ids(QueuedFilter.parse(args='{"tags": ["a", "b"]}')) == [bob]
    assert _ids(QueuedFilter.parse(args='{"user_id": 5, "name": "bob"}')) == []
    assert _ids(QueuedFilter.parse(args='["x"]')) == [alice]
    assert _ids(QueuedFilter.parse(args='"x"')) == [alice]
    assert _ids(QueuedFilter.parse(args="{}")) == [nothing, bob, alice]
    # With the indexed terms too.
    assert _ids(QueuedFilter.parse(args='{"name": "bob"}', status="failed")) == []
    assert _ids(QueuedFilter.parse(args='{"name": "bob"}', task="tests.djtasks.echo")) == [bob]


def test_error_text_key_and_the_retrying_apart_from_the_failed(tasks_alias: str) -> None:
    table = QueuedTask.objects.using(tasks_alias)
    timeout, cancelled, retrying, fresh = (_echo(n) for n in range(4))
    table.filter(uuid__in=[timeout, cancelled]).update(status="FAILED")
    timeout_error = {"exception_class_path": "builtins.TimeoutError", "traceback": "Slow API"}
    table.filter(uuid=timeout).update(errors=[timeout_error])
    QueuedTask.objects.cancel(fresh)  # FAILED, with TaskCancelled as its error
    table.filter(uuid=fresh).update(status="READY", finished_at=None)
    table.filter(uuid=retrying).update(attempts=1, errors=[timeout_error])
    assert _ids(QueuedFilter.parse(error="timeouterror")) == [retrying, timeout]
    assert _ids(QueuedFilter.parse(error="slow api", status="FAILED")) == [timeout]
    assert _ids(QueuedFilter.parse(error="TaskCancelled")) == [fresh]
    assert _ids(QueuedFilter.parse(status="retrying")) == [retrying]
    assert _ids(QueuedFilter.parse(status="FAILED")) == [cancelled, timeout]

    limited = str(djtasks.per_account.enqueue("a").id)
    djtasks.per_account.enqueue("b")
    rated = str(djtasks.two_an_hour.enqueue("a").id)
    assert _ids(QueuedFilter.parse(key="account:a")) == [limited]
    assert _ids(QueuedFilter.parse(key="mail:a")) == [rated]
    assert _ids(QueuedFilter.parse(key="account:c")) == []


def test_the_time_range_is_the_finish_or_else_the_enqueue(tasks_alias: str) -> None:
    table = QueuedTask.objects.using(tasks_alias)
    old, recent, waiting = (_echo(n) for n in range(3))
    now = timezone.now()
    table.filter(uuid=old).update(
        status="SUCCESSFUL",
        enqueued_at=now - dt.timedelta(days=3),
        finished_at=now - dt.timedelta(days=2),
    )
    table.filter(uuid=recent).update(
        status="FAILED",
        enqueued_at=now - dt.timedelta(days=3),
        finished_at=now - dt.timedelta(minutes=30),
    )
    assert _ids(QueuedFilter.parse(since="1h")) == [waiting, recent]
    assert _ids(QueuedFilter.parse(since="3d", until="1d")) == [old]
    assert _ids(QueuedFilter.parse(until="90m")) == [old]
    moment = (now - dt.timedelta(hours=1)).isoformat()
    assert _ids(QueuedFilter.parse(since=moment, status="failed")) == [recent]


@pytest.mark.parametrize(
    ("terms", "message"),
    [
        ({"args": "{user_id: 5}"}, "args must be JSON"),
        ({"args": ""}, "args must not be blank"),
        ({"error": "x" * 1001}, "error must be at most 1000 characters"),
        ({"key": " k"}, "key must not start or end with whitespace"),
        ({"since": "yesterday"}, "since must be an ISO 8601 time (2026-12-06T14:00:00+00:00)"),
        ({"until": "5 weeks"}, "until must be an ISO 8601 time"),
        ({"since": "1h", "until": "2h"}, "The time range is backwards: until"),
        (
            {"since": "2026-12-06T10:00:00+00:00", "until": "2026-12-06T09:00:00+00:00"},
            "The time range is backwards",
        ),
        (
            {"status": "WILL_RETRY"},
            "status must be one of READY, RUNNING, SUCCESSFUL, FAILED, RETRYING, not 'WILL_RETRY'",
        ),
    ],
)
def test_a_bad_term_is_a_value_error_that_names_it(
    refusal_alias: str, terms: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        QueuedFilter.parse(**terms)


def test_a_scan_stops_at_its_budget_and_says_where_to_go_on(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search that matches one old task of many reads SCAN_BUDGET rows a
    page: the first page is empty with a next place, and following the pages
    finds the task, each once."""
    monkeypatch.setattr(search, "SCAN_CHUNK", 10)
    monkeypatch.setattr(search, "SCAN_BUDGET", 20)
    wanted = _echo(user_id=1)
    djtasks.add.get_backend().enqueue_many(djtasks.add, [((n, 1), {}) for n in range(45)])
    filters = QueuedFilter.parse(args='{"user_id": 1}')
    found, before, pages = [], None, 0
    while True:
        page = queued_page(filters, before=before, limit=5)
        pages += 1
        found += [str(row.uuid) for row in page.rows]
        if page.next_before is None:
            break
        before = page.next_before
    assert (found, pages) == ([wanted], 3)  # 20 rows, 20 rows, then the last 6
    # And a page that fills up ends at its last task, as an indexed page does.
    many = QueuedFilter.parse(task="tests.djtasks.add", args="[1]")
    first = queued_page(many, limit=5)
    assert len(first.rows) == 5 and first.next_before == first.rows[-1].seq
