"""The JSON API's bulk actions by filter (django_bgtasks.http.bulk): ``POST
<prefix>/django-tasks/retry/``, ``cancel/`` and ``delete/``, on the
surfaces' engines: the counts each answers, each behind its permission and
the session's CSRF token, and a bad body refused with nothing written."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.test import Client

from django_bgtasks.models import QueuedTask
from tests import djtasks
from tests.http.test_api_search import _client


def _post(client: Client, url: str, data: Any, *, form: bool = False) -> Any:
    if form:
        return client.post(url, data)
    return client.post(url, json.dumps(data), content_type="application/json")


def test_bulk_actions_answer_their_counts_each_behind_its_permission(
    tasks_site_alias: str, make_staff: Any
) -> None:
    table = QueuedTask.objects.using(tasks_site_alias)
    viewer = _client(make_staff, "viewer", "view_backgroundtask")
    operator = _client(make_staff, "operator", "change_backgroundtask")
    deleter = _client(make_staff, "deleter", "delete_backgroundtask")
    batch = djtasks.echo.get_backend().enqueue_many(
        djtasks.echo, [((n,), {"tenant": "a" if n < 4 else "b"}) for n in range(6)]
    )
    before = list(table.order_by("seq").values())
    for url in ("retry", "cancel"):
        refused = _post(viewer, f"/bgtasks/django-tasks/{url}/", {"status": "READY"})
        assert refused.status_code == 403
    assert _post(operator, "/bgtasks/django-tasks/delete/", {"status": "READY"}).status_code == 403
    assert _post(deleter, "/bgtasks/django-tasks/cancel/", {"status": "READY"}).status_code == 403
    assert viewer.get("/bgtasks/django-tasks/cancel/").status_code == 405
    assert list(table.order_by("seq").values()) == before

    cancelled = _post(operator, "/bgtasks/django-tasks/cancel/", {"args": {"tenant": "a"}})
    assert cancelled.status_code == 200
    assert cancelled.json() == {
        "action": "cancel",
        "count": 4,
        "matched": 4,
        "cancelled": 4,
        "stopping": 0,
        "skipped": 0,
    }
    statuses = dict(table.values_list("uuid", "status"))
    assert [statuses[uuid.UUID(result.id)] for result in batch] == ["FAILED"] * 4 + ["READY"] * 2
    form = {"status": "failed", "since": "1h"}
    retried = _post(operator, "/bgtasks/django-tasks/retry/", form, form=True)
    assert retried.json()["retried"] == 4
    deleted = _post(deleter, "/bgtasks/django-tasks/delete/", {"task": "tests.djtasks.echo"})
    assert deleted.json() == {
        "action": "delete",
        "count": 6,
        "matched": 6,
        "deleted": 6,
        "stopping": 0,
        "skipped": 0,
    }
    assert not table.exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Name at least one filter: status, queue"),
        ({"statuss": "READY"}, "Unknown field(s): statuss. Only 'status', 'queue',"),
        ({"status": "FAILED", "queue": ""}, "queue name must not be blank"),
        ({"status": "DONE"}, "status must be one of READY"),
        ({"status": 3}, "status must be a string, not int"),
        ({"args": "{tenant"}, "args must be JSON"),
        ({"since": "2h", "until": "3h"}, "The time range is backwards"),
        ([1], "The body must be a JSON object."),
    ],
)
def test_a_bad_bulk_body_is_a_400_with_nothing_written(
    tasks_site_alias: str, make_staff: Any, body: Any, message: str
) -> None:
    operator = _client(make_staff, "operator", "change_backgroundtask")
    djtasks.echo.enqueue(1)
    table = QueuedTask.objects.using(tasks_site_alias)
    before = list(table.values())
    response = _post(operator, "/bgtasks/django-tasks/cancel/", body)
    assert response.status_code == 400 and message in response.json()["error"]
    assert list(table.values()) == before


def test_a_bulk_action_needs_a_csrf_token_from_a_session(
    tasks_site_alias: str, make_staff: Any
) -> None:
    checked = _client(make_staff, "csrf-operator", "change_backgroundtask", csrf=True)
    djtasks.echo.enqueue(1)
    response = _post(checked, "/bgtasks/django-tasks/cancel/", {"status": "READY"})
    assert response.status_code == 403
    assert QueuedTask.objects.using(tasks_site_alias).get().status == "READY"
