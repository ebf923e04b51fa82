"""The event stream's views (django_bgtasks.http.events; ``watch_url``'s
public path is django_bgtasks.events), served by a real uvicorn process: who
may open a stream (403 and no data for anyone else, the session's end ending
it), one task's stream, bad input, the signed watch URLs, and the 501 under
WSGI. How a stream sends its events (the states, each change, keepalives,
``Last-Event-ID``, many streams at once), django_bgtasks.http.stream:
tests/http/test_stream.py.

Each test starts uvicorn on the test databases (tests/asgiserver.py), then
changes leases from the test process, as another replica would, and reads
what the stream sends. Under WSGI (Django's test client) the endpoints answer
501. Nothing is mocked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from django_bgtasks.http.events import watch_url
from django_bgtasks.models import BackgroundTask
from tests.asgiserver import Stream, get, uvicorn
from tests.http.conftest import FAST
from tests.procs import wait_until


def open_stream(host: str, path: str, cookie: str = "", **headers: str) -> Stream:
    if cookie:
        headers["Cookie"] = cookie
    status, response_headers, body = get(host, path, headers=headers)
    assert status == 200, body
    assert isinstance(body, Stream)
    assert response_headers["cache-control"] == "private, no-cache"
    return body


def next_state(stream: Stream, name: str, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        event = stream.next_event(max(0.01, deadline - time.monotonic()))
        if event.kind == "state" and event.data["name"] == name:
            assert event.id
            data: dict[str, Any] = event.data
            return data


def test_a_page_offers_the_stream_only_where_it_is_served(settings: Any) -> None:
    """A page served under WSGI names no stream (it would be answered 501,
    which the browser logs as an error); one served under ASGI does; and
    ``BGTASKS_ADMIN_EVENTS`` decides for a site that routes the events/ URLs
    to an ASGI server, or wants none."""
    from django.test import AsyncRequestFactory, RequestFactory

    from django_bgtasks.http.events import stream_offered

    wsgi, asgi = RequestFactory().get("/admin/"), AsyncRequestFactory().get("/admin/")
    assert (stream_offered(wsgi), stream_offered(asgi)) == (False, True)
    settings.BGTASKS_ADMIN_EVENTS = True
    assert (stream_offered(wsgi), stream_offered(asgi)) == (True, True)
    settings.BGTASKS_ADMIN_EVENTS = False
    assert (stream_offered(wsgi), stream_offered(asgi)) == (False, False)


def test_a_one_task_stream_sends_that_task_alone(server: str, staff_cookie: str) -> None:
    BackgroundTask.objects.try_claim("job", "elsewhere")
    BackgroundTask.objects.try_claim("other", "elsewhere")
    stream = open_stream(server, "/bgtasks/job/events/", staff_cookie)
    try:
        assert next_state(stream, "job")["owner"] == "elsewhere"
        BackgroundTask.objects.force_release("other")
        BackgroundTask.objects.force_release("job")
        assert next_state(stream, "job")["outcome"] == "released-by-operator"
    finally:
        stream.close()


@pytest.mark.parametrize("path", ["/bgtasks/events/", "/bgtasks/job/events/"])
def test_anyone_but_staff_with_the_view_permission_gets_403_and_no_data(
    server: str, make_staff: Callable[..., Any], path: str
) -> None:
    BackgroundTask.objects.try_claim("job", "secret-owner")
    client = Client()
    client.force_login(make_staff("nobody"))  # staff, without the permission
    for headers in ({}, {"Cookie": f"sessionid={client.cookies['sessionid'].value}"}):
        status, response_headers, body = get(server, path, headers=headers)
        assert status == 403
        assert response_headers["content-type"] == "application/json"
        assert isinstance(body, bytes) and b"secret-owner" not in body and b"error" in body


def test_the_stream_is_a_get_that_needs_no_csrf_token_and_refuses_writes(
    server: str, staff_cookie: str
) -> None:
    # No CSRF cookie or token, no Referer: a GET opens the stream.
    open_stream(server, "/bgtasks/events/", staff_cookie).close()
    for method in ("POST", "PUT", "DELETE"):
        status, headers, _ = get(
            server, "/bgtasks/events/", method=method, headers={"Cookie": staff_cookie}
        )
        # The CSRF middleware refuses an unsafe method first (403), else the view (405).
        assert status in (403, 405)
        assert not headers["content-type"].startswith("text/event-stream")


def test_the_stream_ends_when_the_session_does(
    server: str, make_staff: Callable[..., Any]
) -> None:
    client = Client()
    client.force_login(make_staff("leaving", "view_backgroundtask"))
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    stream = open_stream(server, "/bgtasks/events/", cookie)
    try:
        while stream.next(5).kind != "comment":  # the states, then a keepalive: allowed
            pass
        client.logout()  # deletes the session
        deadline = time.monotonic() + 10
        while stream.next(5).kind != "end":
            assert time.monotonic() < deadline, "the stream went on after the logout"
        with pytest.raises(EOFError):
            stream.next(5)
    finally:
        stream.close()


def test_a_killed_listener_is_healed_and_the_stream_goes_on(
    pg_site_alias: str, staff_cookie: str
) -> None:
    pg_alias = pg_site_alias
    with uvicorn(["default", pg_alias], BGTASKS_DATABASE=pg_alias, **FAST) as server:
        lease = BackgroundTask.objects.try_claim("job", "elsewhere", {"done": 0})
        assert lease is not None
        stream = open_stream(server, "/bgtasks/job/events/", staff_cookie)
        try:
            next_state(stream, "job")

            def kill_listener() -> bool:
                # The stream's first state may come before the server's feed
                # has connected (and named) its listener: kill it once it has.
                with connections[pg_alias].cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = 'bgtasks-changes'"
                    )
                    assert cursor.rowcount <= 1
                    return cursor.rowcount == 1

            wait_until("the server's listener to be killed", kill_listener, timeout=10)
            BackgroundTask.objects.update_state("job", "elsewhere", {"done": 1})
            assert next_state(stream, "job")["value"] == {"done": 1}
            BackgroundTask.objects.update_state("job", "elsewhere", {"done": 2})
            assert next_state(stream, "job")["value"] == {"done": 2}
        finally:
            stream.close()


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/bgtasks/never-ran/events/", 404),
        ("/bgtasks/%20/events/", 400),
        ("/bgtasks/" + "x" * 201 + "/events/", 400),
        ("/bgtasks/watch/not-signed/", 403),
        ("/bgtasks/watch/not-signed/events/", 403),
        ("/bgtasks/watch/eyJ0YXNrIjoiam9iIn0:1abc:forged/events/", 403),
    ],
)
def test_bad_input_is_a_json_error_never_a_500(
    server: str, staff_cookie: str, path: str, status: int
) -> None:
    got, headers, body = get(server, path, headers={"Cookie": staff_cookie})
    assert (got, headers["content-type"]) == (status, "application/json")
    assert isinstance(body, bytes) and b'"error"' in body


# --- signed watch URLs ----------------------------------------------------------------


def test_a_watch_url_shows_one_task_without_a_session(server: str) -> None:
    lease = BackgroundTask.objects.try_claim("job", "elsewhere", {"done": 1})
    BackgroundTask.objects.try_claim("other", "elsewhere")
    assert lease is not None
    url = watch_url("job", expires=60)
    status, _, body = get(server, url)
    assert status == 200 and isinstance(body, bytes) and b'"name": "job"' in body
    stream = open_stream(server, url + "events/")
    try:
        assert next_state(stream, "job")["value"] == {"done": 1}
        BackgroundTask.objects.update_state("other", "elsewhere", {"x": 1})
        BackgroundTask.objects.update_state("job", "elsewhere", {"done": 2})
        event = stream.next_event()  # never "other"'s
        while event.kind == "heartbeats":  # a keepalive's, of "job" alone
            assert set(event.data) == {"job"}
            event = stream.next_event()
        assert (event.kind, event.data["name"], event.data["value"]) == (
            "state",
            "job",
            {"done": 2},
        )
    finally:
        stream.close()
    # Its scope is that one task, read only: not the list, not another task, no writes.
    signed = re.search(r"/watch/([^/]+)/", url)
    assert signed is not None
    for path in ("/bgtasks/", "/bgtasks/other/", "/bgtasks/events/"):
        assert get(server, path, headers={"Authorization": f"Bearer {signed[1]}"})[0] == 403
    for path in (url, url + "events/", url + "cancel/", url + "run/"):
        assert get(server, path, method="POST")[0] in (403, 404, 405)  # CSRF, or no such URL


def test_a_watch_url_expires(server: str) -> None:
    BackgroundTask.objects.try_claim("job", "elsewhere")
    url = watch_url("job", expires=1)
    assert get(server, url)[0] == 200
    stream = open_stream(server, url + "events/")
    try:
        time.sleep(1.1)
        deadline = time.monotonic() + 5
        while stream.next(5).kind != "end":  # an open stream ends at its next keepalive
            assert time.monotonic() < deadline
    finally:
        stream.close()
    status, _, body = get(server, url)
    assert status == 403 and isinstance(body, bytes) and b"expired" in body
    assert get(server, url + "events/")[0] == 403


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"expires": 0}, ValueError),
        ({"expires": "1"}, TypeError),
        ({"expires": float("inf")}, ValueError),
    ],
)
def test_a_bad_watch_url_request_is_refused(kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error, match="expires"):
        watch_url("job", **kwargs)


def test_under_wsgi_the_streams_answer_501_and_point_at_the_polling_api(
    site_alias: str, staff_cookie: str
) -> None:
    BackgroundTask.objects.try_claim("job", "elsewhere")
    client = Client(HTTP_COOKIE=staff_cookie)
    for path, poll in (
        ("/bgtasks/events/", "/bgtasks/"),
        ("/bgtasks/job/events/", "/bgtasks/job/"),
    ):
        response = client.get(path)
        assert response.status_code == 501
        assert response.json()["poll"] == poll
        assert "ASGI" in response.json()["error"]
    response = client.get(watch_url("job") + "events/")
    assert response.status_code == 501


# --- many streams ------------------------------------------------------------------------


def test_every_stream_of_a_session_ends_when_the_session_does(
    server: str, make_staff: Callable[..., Any]
) -> None:
    # The process checks the session once per keepalive for all its streams:
    # the answer it shares must end every one of them.
    client = Client()
    client.force_login(make_staff("tabs", "view_backgroundtask"))
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    streams = [open_stream(server, "/bgtasks/events/", cookie) for _ in range(3)]
    try:
        for stream in streams:
            while stream.next(5).kind != "comment":  # allowed at a keepalive
                pass
        client.logout()
        for stream in streams:
            deadline = time.monotonic() + 10
            while stream.next(5).kind != "end":
                assert time.monotonic() < deadline, "a stream went on after the logout"
    finally:
        for stream in streams:
            stream.close()
