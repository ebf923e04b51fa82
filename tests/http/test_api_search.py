"""The JSON API's search of Django Tasks (``GET <prefix>/django-tasks/?args=
&error=&key=&since=&until=``): what it finds, and a bad search refused with
a 400 that names it. Its bulk actions by the same filter:
tests/http/test_bulk.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_bgtasks.models import QueuedTask
from tests import djtasks


def _client(make_staff: Any, name: str, *codenames: str, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(make_staff(name, *codenames))
    return client


def _ids(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["django_tasks"]]


def test_the_list_finds_tasks_by_arguments_error_key_and_time(
    tasks_site_alias: str, make_staff: Any
) -> None:
    viewer = _client(make_staff, "viewer", "view_backgroundtask")
    alice = str(djtasks.echo.enqueue(user_id=5).id)
    bob = str(djtasks.echo.enqueue(user_id=6).id)
    QueuedTask.objects.cancel(bob)
    limited = str(djtasks.per_account.enqueue("a").id)
    page = viewer.get("/bgtasks/django-tasks/", {"args": '{"user_id": 5}'}).json()
    assert (_ids(page), page["next"]) == ([alice], None)
    assert _ids(viewer.get("/bgtasks/django-tasks/?error=taskcancelled").json()) == [bob]
    assert _ids(viewer.get("/bgtasks/django-tasks/?key=account:a").json()) == [limited]
    recent = viewer.get("/bgtasks/django-tasks/?since=1h&status=READY").json()
    assert _ids(recent) == [limited, alice]
    assert _ids(viewer.get("/bgtasks/django-tasks/?until=1h").json()) == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("args=%7Buser%7D", "args must be JSON"),
        ("since=soon", "since must be an ISO 8601 time"),
        ("since=1h&until=2h", "The time range is backwards"),
        ("status=gone", "status must be one of READY, RUNNING, SUCCESSFUL, FAILED, RETRYING"),
    ],
)
def test_a_bad_search_is_a_400_that_names_it(
    refusal_alias: str, make_staff: Any, query: str, message: str
) -> None:
    viewer = _client(make_staff, "viewer", "view_backgroundtask")
    response = viewer.get(f"/bgtasks/django-tasks/?{query}")
    assert response.status_code == 400 and message in response.json()["error"]
