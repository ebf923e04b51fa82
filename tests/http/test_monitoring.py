"""http/monitoring.py: the metrics view's access and text, its answer without
prometheus_client, and the readiness view. (A real Prometheus scraping it:
tests/http/test_prometheus.py; the system check of a view mounted without
prometheus_client: tests/checks/test_metrics_view.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from django_bgtasks.authentication import SIGNED_TOKEN, make_token
from django_bgtasks.background import registry
from django_bgtasks.http import monitoring
from django_bgtasks.models import BackgroundTask
from tests import tools
from tests.dbtools import app_migrations
from tests.http.test_api import assert_json_error

objects = BackgroundTask.objects
URL = "/bgtasks/metrics/"


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def test_anonymous_unprivileged_and_bad_tokens_get_403_and_no_metrics(
    site_alias: str, make_staff: Any, settings: Any
) -> None:
    settings.BGTASKS_API_AUTHENTICATION = [SIGNED_TOKEN]
    objects.try_claim("cleanup", "worker-1", ttl=30)
    no_perm_staff = Client()
    no_perm_staff.force_login(make_staff("staff"))
    bad_token = Client(HTTP_AUTHORIZATION="Bearer nonsense")
    for client in (Client(), no_perm_staff, bad_token):
        body = assert_json_error(client.get(URL), 403)
        assert "bgtasks_" not in body["error"]


def test_a_bearer_token_of_a_viewer_gets_the_gauges(
    site_alias: str, make_staff: Any, settings: Any
) -> None:
    settings.BGTASKS_API_AUTHENTICATION = [SIGNED_TOKEN]
    token = make_token(make_staff("prometheus", "view_backgroundtask"))
    objects.try_claim("cleanup", "worker-1", ttl=30)
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get(URL)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    assert "no-cache" in response["Cache-Control"]
    found = samples(response.content)
    assert found[("bgtasks_tasks", (("status", "running"),))] == 1
    # The registered tasks but cleanup (the test app's, and any a test module
    # imported in this process registers).
    never_run = len(registry.registered()) - ("cleanup" in registry.registered())
    assert found[("bgtasks_tasks", (("status", "never run"),))] == never_run
    assert found[("bgtasks_workers", (("state", "live"),))] == 0
    assert found[("bgtasks_stale_leases", ())] == 0


def test_a_session_with_the_view_permission_gets_them_too(
    site_alias: str, make_staff: Any
) -> None:
    client = Client()
    client.force_login(make_staff("watcher", "view_backgroundtask"))
    response = client.get(URL)
    assert response.status_code == 200
    assert b"# TYPE bgtasks_queue_lag_seconds gauge" in response.content


@pytest.fixture
def without_prometheus_client() -> Iterator[None]:
    """The app as it runs without the metrics extra, and as it was afterwards."""
    with tools.without_prometheus_client(monitoring):
        yield


def test_without_prometheus_client_the_view_says_how_to_install_it(
    site_alias: str, make_staff: Any, without_prometheus_client: None
) -> None:
    client = Client()
    client.force_login(make_staff("watcher", "view_backgroundtask"))
    body = assert_json_error(client.get(URL), 501)
    assert "django-bgtasks[metrics]" in body["error"]
    # Access is checked first: an anonymous request learns nothing more.
    assert_json_error(Client().get(URL), 403)
    # The readiness view needs nothing of it.
    assert Client().get("/bgtasks/ready/").status_code == 200


# --- the readiness view ------------------------------------------------------------------


def test_ready_answers_200_to_anyone_when_healthy(site_alias: str) -> None:
    response = Client().get("/bgtasks/ready/")
    assert response.status_code == 200 and response.json() == {"ready": True}
    assert "no-cache" in response["Cache-Control"]


def test_ready_with_workers_answers_503_with_the_reason_until_they_beat(site_alias: str) -> None:
    response = Client().get("/bgtasks/ready/?workers=1")
    assert response.status_code == 503
    assert response.json() == {
        "ready": False,
        "reason": "0 live worker(s), fewer than the 1 required",
    }
    objects.work.beat(worker="w1", host="h", pid=1, tasks=[], concurrency=1, running=[])
    assert Client().get("/bgtasks/ready/?workers=1").status_code == 200


def test_ready_with_migrations_missing_answers_503(site_alias: str) -> None:
    # Back to the migration before the last: one left to apply.
    before_last = app_migrations()[-2]
    call_command("migrate", "django_bgtasks", before_last, database=site_alias, verbosity=0)
    try:
        response = Client().get("/bgtasks/ready/")
    finally:
        call_command("migrate", "django_bgtasks", database=site_alias, verbosity=0)
    assert response.status_code == 503
    assert response.json()["reason"] == (
        f"1 migration(s) of django_bgtasks not applied on database {site_alias!r}"
    )


@pytest.mark.parametrize("bad", ["-1", "x", "1.5", ""])
def test_ready_refuses_a_bad_worker_count(refusal_alias: str, bad: str) -> None:
    body = assert_json_error(Client().get("/bgtasks/ready/", {"workers": bad}), 400)
    assert repr(bad) in body["error"]


@pytest.mark.parametrize("atomic_requests", [False, True])
def test_ready_with_the_database_down_answers_503_with_the_reason_only(
    refusal_alias: str, atomic_requests: bool
) -> None:
    # A server process whose lease database is a closed port (here, only
    # the settings of an alias no test connects to).
    from django.db import connections

    from tests.asgiserver import free_port, get, uvicorn

    connections.settings["down"] = {
        **connections["default"].settings_dict,
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "bgtasks",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": str(free_port()),
        "ATOMIC_REQUESTS": atomic_requests,
    }
    try:
        with uvicorn(["default", "down"], BGTASKS_DATABASE="down") as host:
            status, _headers, body = get(host, "/bgtasks/ready/")
    finally:
        del connections["down"]
        del connections.settings["down"]
    assert status == 503
    # Not the driver's message: it names the host and the port.
    assert isinstance(body, bytes)
    assert json.loads(body) == {"ready": False, "reason": "database 'down' unreachable"}
