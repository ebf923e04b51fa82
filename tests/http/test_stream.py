"""How the event stream sends its events (django_bgtasks.http.stream), served
by a real uvicorn process: every watched task's state, then each change made
elsewhere, the keepalive and the heartbeat ages; ``Last-Event-ID`` resuming
without repeats; and more streams opening at once than the process's read
slots. The views that open a stream, and who may: tests/http/test_events.py.
"""

from __future__ import annotations

import pytest

from django_bgtasks.models import BackgroundTask
from tests.http.test_events import next_state, open_stream


def test_a_stream_sends_the_state_then_every_change_made_elsewhere(
    server: str, staff_cookie: str
) -> None:
    first = BackgroundTask.objects.try_claim("job", "elsewhere", {"done": 0, "total": 3})
    assert first is not None
    stream = open_stream(server, "/bgtasks/events/", staff_cookie)
    try:
        assert next_state(stream, "job")["value"] == {"done": 0, "total": 3}
        BackgroundTask.objects.update_state("job", "elsewhere", {"done": 2, "total": 3})
        assert next_state(stream, "job")["progress"] == pytest.approx(2 / 3)
        BackgroundTask.objects.release("job", "elsewhere", token=first.token)
        ended = next_state(stream, "job")
        assert ended["running"] is False and ended["outcome"] == "succeeded"
        # The keepalive comment, here every 0.5 s, then the heartbeat ages,
        # which are no change and come only this way.
        kinds = [stream.next(5) for _ in range(4)]
        assert "comment" in [event.kind for event in kinds]
        ages = next(event.data for event in kinds if event.kind == "heartbeats")
        assert set(ages) >= {"job"} and ages["job"] >= 0
    finally:
        stream.close()


def test_last_event_id_resumes_without_repeats_or_with_what_was_missed(
    server: str, staff_cookie: str
) -> None:
    BackgroundTask.objects.try_claim("job", "elsewhere", {"done": 1})
    stream = open_stream(server, "/bgtasks/events/", staff_cookie)
    next_state(stream, "job")
    while stream.next(5).kind != "comment":  # every task's state, then the keepalive
        pass
    seen = stream.last_id
    stream.close()
    assert seen

    # Nothing changed: the reconnected stream repeats nothing.
    stream = open_stream(server, "/bgtasks/events/", staff_cookie, **{"Last-Event-ID": seen})
    try:
        assert stream.next(5).kind == "comment"  # the keepalive comes, no state
    finally:
        stream.close()

    # A change while disconnected: it comes first on reconnecting.
    BackgroundTask.objects.update_state("job", "elsewhere", {"done": 2})
    stream = open_stream(server, "/bgtasks/events/", staff_cookie, **{"Last-Event-ID": seen})
    try:
        assert next_state(stream, "job", timeout=2)["value"] == {"done": 2}
    finally:
        stream.close()


def test_streams_opened_all_at_once_each_get_their_state_and_every_change(
    server: str, staff_cookie: str
) -> None:
    # More streams than the process's READ_SLOTS open at the same moment:
    # their reads queue for a slot, and every one opens.
    from concurrent.futures import ThreadPoolExecutor

    from django_bgtasks.http.stream import READ_SLOTS

    BackgroundTask.objects.try_claim("job", "elsewhere", {"done": 0})
    count = READ_SLOTS * 4
    with ThreadPoolExecutor(count) as pool:
        streams = list(
            pool.map(
                lambda _: open_stream(server, "/bgtasks/job/events/", staff_cookie), range(count)
            )
        )
    try:
        for stream in streams:
            assert next_state(stream, "job")["value"] == {"done": 0}
        BackgroundTask.objects.update_state("job", "elsewhere", {"done": 1})
        for stream in streams:
            assert next_state(stream, "job")["value"] == {"done": 1}
    finally:
        for stream in streams:
            stream.close()
