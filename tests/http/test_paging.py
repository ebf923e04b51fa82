"""The query of the JSON API's list of Django Tasks (django_bgtasks.http.paging),
on the surfaces' engines: the ``next`` link pages through every task once,
newest first, with the list's filters; its cursor is signed, so a forged or
foreign one is refused; and an unknown parameter, one given twice, or a bad
value is a 400 that names it."""

from __future__ import annotations

import pytest
from django.test import Client

from django_bgtasks.conf import conf


def test_the_django_tasks_list_pages_by_its_next_link_with_its_filters(
    tasks_site_alias: str, viewer: Client
) -> None:
    from tests import djtasks

    add, echo = djtasks.add, djtasks.echo.using(queue_name="other")
    added = [
        str(r.id) for r in add.get_backend().enqueue_many(add, [((n, 1), {}) for n in range(5)])
    ]
    echoed = [
        str(r.id) for r in echo.get_backend().enqueue_many(echo, [((n,), {}) for n in range(3)])
    ]
    first = viewer.get("/bgtasks/django-tasks/?limit=3")
    body = first.json()
    assert [item["id"] for item in body["django_tasks"]] == echoed[::-1]
    assert body["next"].startswith("http://testserver/bgtasks/django-tasks/?")
    seen, url = [], body["next"]
    while url:
        page = viewer.get(url).json()
        seen += [item["id"] for item in page["django_tasks"]]
        url = page["next"]
    assert seen == added[::-1]  # the rest, newest first, each once
    filtered = viewer.get("/bgtasks/django-tasks/?queue=other&task=tests.djtasks.echo&limit=2")
    page = filtered.json()
    assert [item["id"] for item in page["django_tasks"]] == echoed[:0:-1]
    assert "queue=other" in page["next"] and "limit=2" in page["next"]
    last = viewer.get(page["next"]).json()
    assert ([item["id"] for item in last["django_tasks"]], last["next"]) == ([echoed[0]], None)
    failed = viewer.get("/bgtasks/django-tasks/?status=failed&backend=default").json()
    read_from = failed.pop("read_from")
    assert failed == {"django_tasks": [], "next": None}
    # No BGTASKS_READ_DATABASE: read from BGTASKS_DATABASE, as it says.
    assert read_from == {
        "database": conf.DATABASE,
        "replica": False,
        "lag_seconds": 0.0,
        "fallback": None,
    }
    assert viewer.head("/bgtasks/django-tasks/?status=READY").status_code == 200


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("statu=FAILED", "Unknown parameter 'statu': the list takes status, queue, task,"),
        ("status=FAILED&status=READY", "The parameter 'status' is given 2 times."),
        ("status=DONE", "status must be one of READY, RUNNING, SUCCESSFUL, FAILED"),
        ("queue=", "queue name must not be blank"),
        ("limit=0", "limit must be a whole number from 1 to 500, not 0"),
        ("limit=501", "limit must be a whole number from 1 to 500, not 501"),
        ("limit=all", "limit must be a whole number from 1 to 500, not 'all'"),
        ("cursor=12", "The cursor is not one this API made"),
        ("cursor=1:forged", "The cursor is not one this API made"),
    ],
)
def test_a_bad_django_tasks_list_query_is_a_400_that_names_it(
    refusal_alias: str, viewer: Client, query: str, message: str
) -> None:
    response = viewer.get(f"/bgtasks/django-tasks/?{query}")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert message in response.json()["error"]


def test_a_tampered_cursor_is_a_400(tasks_site_alias: str, viewer: Client) -> None:
    """A cursor of this API with its place changed, or made under another
    SECRET_KEY, is refused, not followed from the place it claims."""
    from django.core import signing

    from tests import djtasks

    djtasks.add.get_backend().enqueue_many(djtasks.add, [((n, 1), {}) for n in range(3)])
    cursor = viewer.get("/bgtasks/django-tasks/?limit=1").json()["next"].split("cursor=")[1]
    place, signature = cursor.split("%3A")
    forged = f"{int(place) + 1}%3A{signature}"
    assert viewer.get(f"/bgtasks/django-tasks/?cursor={forged}").status_code == 400
    elsewhere = signing.Signer(key="another-site", salt="django_bgtasks.http.paging.cursor")
    foreign = elsewhere.sign(place).replace(":", "%3A")
    assert viewer.get(f"/bgtasks/django-tasks/?cursor={foreign}").status_code == 400
    assert viewer.get(f"/bgtasks/django-tasks/?cursor={cursor}").status_code == 200
