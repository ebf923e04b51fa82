"""The public path of the watch URLs (django_bgtasks.events): it exports
``watch_url``, the very function of :mod:`django_bgtasks.http.events`, and a
URL made from it shows its task's state, without a session. The event
stream itself: tests/http/test_events.py and tests/http/test_stream.py."""

from __future__ import annotations

from django.test import Client

from django_bgtasks import events
from django_bgtasks.http import events as http_events
from django_bgtasks.models import BackgroundTask


def test_the_public_path_exports_watch_url_alone() -> None:
    assert events.__all__ == ["watch_url"]
    assert events.watch_url is http_events.watch_url


def test_a_watch_url_from_the_public_path_shows_its_task_to_anyone(site_alias: str) -> None:
    BackgroundTask.objects.try_claim("job", "elsewhere", {"done": 1}, ttl=30)
    url = events.watch_url("job", expires=60)
    response = Client().get(url)
    assert response.status_code == 200
    assert (response.json()["name"], response.json()["value"]) == ("job", {"done": 1})
    # Read only, and only as signed.
    assert Client().post(url).status_code == 405
    assert Client().get(url.replace("/watch/", "/watch/x")).status_code == 403
