"""The Django tasks list's search terms and its bulk actions
(admin/queued_list.py, admin/queued_bulk.py), on the surfaces' engines:
terms in the search box, "will retry" apart from "failed", a search that
stops at its budget and says so, and "Retry all", "Cancel all" and "Delete
all" with their confirmation, each behind its permission."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client

from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import search
from tests import djtasks

QUEUED = "/admin/django_bgtasks/queuedtask/"


def _client(make_staff: Any, name: str, *codenames: str, superuser: bool = False) -> Client:
    client = Client()
    client.force_login(make_staff(name, *codenames, superuser=superuser))
    return client


def _listed(response: Any) -> list[str]:
    return [str(row.uuid) for row in response.context["cl"].result_list]


def _tenants() -> list[str]:
    batch = djtasks.echo.get_backend().enqueue_many(
        djtasks.echo, [((n,), {"tenant": "a" if n < 3 else "b"}) for n in range(5)]
    )
    return [str(result.id) for result in batch]


def _messages(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_the_search_box_takes_terms_and_will_retry_is_apart_from_failed(
    tasks_site_alias: str, make_staff: Any
) -> None:
    root = _client(make_staff, "root", superuser=True)
    ids = _tenants()
    table = QueuedTask.objects.using(tasks_site_alias)
    listed = _listed(root.get(QUEUED, {"q": 'args:{"tenant":"a"}'}))
    assert listed == ids[2::-1]
    quoted = _listed(root.get(QUEUED, {"q": 'args:\'{"tenant": "b"}\' echo'}))
    assert quoted == ids[:2:-1]
    QueuedTask.objects.cancel(ids[0])
    assert _listed(root.get(QUEUED, {"q": "error:taskcancelled"})) == [ids[0]]
    table.filter(uuid=uuid.UUID(ids[1])).update(attempts=1)
    retrying = root.get(QUEUED, {"status__exact": "RETRYING"})
    assert _listed(retrying) == [ids[1]]
    assert "will retry (1)" in retrying.content.decode()
    assert _listed(root.get(QUEUED, {"status__exact": "FAILED"})) == [ids[0]]
    bad = root.get(QUEUED, {"q": "since:someday"})
    assert _listed(bad) == [] and any("since must be" in text for text in _messages(bad))


def test_a_search_that_stops_at_its_budget_says_so(
    tasks_site_alias: str, make_staff: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "SCAN_CHUNK", 2)
    monkeypatch.setattr(search, "SCAN_BUDGET", 2)
    root = _client(make_staff, "root", superuser=True)
    ids = _tenants()
    page = root.get(QUEUED, {"q": 'args:{"tenant":"a"}'})
    assert _listed(page) == []  # the newest two are tenant b's
    assert any("The search tested the newest 2 Django tasks" in text for text in _messages(page))
    whole = root.get(f"{QUEUED}bulk/cancel/", {"q": 'args:{"tenant":"a"}'})
    assert "<strong>3+</strong>" not in whole.content.decode()  # the count's own cap
    root.post(f"{QUEUED}bulk/cancel/?q=args:%7B%22tenant%22:%22a%22%7D")
    statuses = dict(QueuedTask.objects.using(tasks_site_alias).values_list("uuid", "status"))
    assert [statuses[uuid.UUID(one)] for one in ids] == ["FAILED"] * 3 + ["READY"] * 2


def test_bulk_actions_confirm_then_act_on_what_the_list_holds(
    tasks_site_alias: str, make_staff: Any
) -> None:
    table = QueuedTask.objects.using(tasks_site_alias)
    viewer = _client(make_staff, "viewer", "view_backgroundtask")
    operator = _client(make_staff, "operator", "view_backgroundtask", "change_backgroundtask")
    root = _client(make_staff, "root", superuser=True)
    ids = _tenants()
    query = "?q=args:%7B%22tenant%22:%22a%22%7D"
    listed = operator.get(QUEUED + query).content.decode()
    kept = "?q=args%3A%7B%22tenant%22%3A%22a%22%7D"  # the list's query, as it encodes it
    assert f'href="{QUEUED}bulk/retry/{kept}"' in listed
    assert f'href="{QUEUED}bulk/cancel/{kept}"' in listed
    assert "bulk/delete/" not in listed  # no delete permission
    assert "bulk/" not in operator.get(QUEUED).content.decode()  # no filter: no button
    assert "bulk/" not in viewer.get(QUEUED + query).content.decode()
    before = list(table.order_by("seq").values())
    assert viewer.get(f"{QUEUED}bulk/cancel/{query}").status_code == 403
    assert viewer.post(f"{QUEUED}bulk/cancel/{query}").status_code == 403
    assert operator.post(f"{QUEUED}bulk/delete/{query}").status_code == 403
    assert operator.get(f"{QUEUED}bulk/purge/{query}").status_code == 404
    unfiltered = operator.post(f"{QUEUED}bulk/cancel/", follow=True)
    assert "Filter or search the list first" in " ".join(_messages(unfiltered))
    bad = operator.post(f"{QUEUED}bulk/cancel/?q=since:1h+until:2h", follow=True)
    assert any("The time range is backwards" in text for text in _messages(bad))
    assert list(table.order_by("seq").values()) == before

    confirm = operator.get(f"{QUEUED}bulk/cancel/{query}")
    assert confirm.status_code == 200
    assert "The list holds <strong>3</strong> Django tasks now." in confirm.content.decode()
    assert list(table.order_by("seq").values()) == before  # a GET writes nothing
    done = operator.post(f"{QUEUED}bulk/cancel/{query}", follow=True)
    assert done.redirect_chain[-1][0] == QUEUED + kept
    assert "Cancelled 3 of the 3 Django Tasks the filter matched." in _messages(done)
    retried = operator.post(f"{QUEUED}bulk/retry/?status__exact=FAILED", follow=True)
    assert "Retried 3 of the 3 Django Tasks the filter matched." in _messages(retried)
    deleted = root.post(f"{QUEUED}bulk/delete/?q=echo", follow=True)
    assert "Deleted 5 of the 5 Django Tasks the filter matched." in _messages(deleted)
    assert not table.filter(uuid__in=[uuid.UUID(one) for one in ids]).exists()
