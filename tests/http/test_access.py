"""Who may use the JSON API (django_bgtasks.http.access), on the surfaces'
engines: anyone but staff with the model's view permission gets a 403 JSON
error and no data, a write needs the change permission, and a session's
writes need their CSRF token, refused with a JSON 403 that is logged as
Django logs its own. The bearer token's hooks themselves:
tests/test_authentication.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client

from django_bgtasks.authentication import SIGNED_TOKEN
from django_bgtasks.models import BackgroundTask
from tests.dbtools import rows
from tests.http.test_api import assert_json_error, post_json

objects = BackgroundTask.objects


@pytest.mark.parametrize(
    "url", ["/bgtasks/", "/bgtasks/cleanup/", "/bgtasks/nope/"], ids=["list", "task", "unknown"]
)
def test_anonymous_and_unprivileged_users_get_403_json_and_no_data(
    site_alias: str, make_staff: Any, url: str
) -> None:
    objects.try_claim("cleanup", "worker-1", {"secret": "s3cr3t"}, ttl=30)
    no_perm_staff = Client()
    no_perm_staff.force_login(make_staff("staff"))
    not_staff = Client()
    not_staff.force_login(make_staff("member", "view_backgroundtask", staff=False))

    for client in (Client(), no_perm_staff, not_staff):
        response = client.get(url)
        assert response.status_code == 403
        assert response["Content-Type"] == "application/json"
        assert set(response.json()) == {"error"}
        assert b"s3cr3t" not in response.content and b"worker-1" not in response.content


def test_view_permission_is_not_enough_to_run_or_cancel(site_alias: str, viewer: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)

    assert post_json(viewer, "/bgtasks/surface-quick/run/").status_code == 403
    assert post_json(viewer, "/bgtasks/cleanup/cancel/").status_code == 403
    assert post_json(Client(), "/bgtasks/surface-quick/run/").status_code == 403
    assert rows(site_alias) == before


def test_change_permission_alone_can_read_too(site_alias: str, operator: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    assert operator.get("/bgtasks/cleanup/").status_code == 200


def test_posts_without_a_csrf_token_are_refused(
    site_alias: str, make_staff: Any, settle: Any
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_staff("operator", "change_backgroundtask"))
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)

    for url in ("/bgtasks/surface-quick/run/", "/bgtasks/cleanup/cancel/"):
        body = assert_json_error(post_json(client, url), 403)  # JSON, not Django's page
        assert body["error"].startswith("CSRF verification failed: "), body
    result_id = "00000000-0000-4000-8000-000000000000"
    assert_json_error(post_json(client, f"/bgtasks/django-tasks/{result_id}/cancel/"), 403)
    assert rows(site_alias) == before

    # The same requests with the token (as a front end's fetch() sends it) pass.
    client.get("/bgtasks/")  # any page that sets the cookie would do
    client.cookies.load({"csrftoken": "a" * 32})
    token = {"headers": {"x-csrftoken": "a" * 32}}
    assert post_json(client, "/bgtasks/surface-quick/run/", **token).status_code == 202
    assert post_json(client, "/bgtasks/cleanup/cancel/", **token).status_code == 202
    settle("surface-quick")


def test_a_csrf_refusal_is_logged_as_django_logs_its_own(
    refusal_alias: str, make_staff: Any, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_staff("operator", "change_backgroundtask"))
    with caplog.at_level(logging.WARNING, logger="django.security.csrf"):
        body = assert_json_error(post_json(client, "/bgtasks/surface-quick/run/"), 403)
    assert body == {"error": "CSRF verification failed: CSRF cookie not set."}
    [logged] = [record for record in caplog.records if record.name == "django.security.csrf"]
    assert logged.levelname == "WARNING" and logged.status_code == 403
    assert logged.getMessage() == "Forbidden (CSRF cookie not set.): /bgtasks/surface-quick/run/"
    assert rows(refusal_alias) == []


def test_an_authorization_header_no_hook_accepts_refuses_only_a_request_without_a_session(
    site_alias: str, viewer: Client, settings: Any
) -> None:
    """A session's request may carry another service's ``Authorization``
    header (a proxy's basic auth): the session user is asked, as without
    it. Without a session, the header no hook accepted is refused
    (``access.hook_refusal``), before the permission is asked."""
    settings.BGTASKS_API_AUTHENTICATION = [SIGNED_TOKEN]
    objects.try_claim("cleanup", "worker-1", ttl=30)
    basic = {"Authorization": "Basic dXNlcjpwYXNz"}
    assert viewer.get("/bgtasks/cleanup/", headers=basic).json()["owner"] == "worker-1"
    body = assert_json_error(Client().get("/bgtasks/cleanup/", headers=basic), 403)
    assert body["error"] == "The Authorization header was not accepted."
    # Without the header, the same request is refused by the permission check.
    body = assert_json_error(Client().get("/bgtasks/cleanup/"), 403)
    assert body["error"] == "Log in as a staff member to see background tasks."
