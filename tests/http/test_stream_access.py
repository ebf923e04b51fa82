"""The access checks an open event stream repeats at each keepalive
(django_bgtasks.http.stream_access), shared by a process's streams. The
streams that end by them, served by uvicorn: tests/http/test_events.py.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django_bgtasks.http.stream_access import _SharedChecks


def test_a_process_checks_a_session_once_a_keepalive_however_many_streams_ask(
    settings: Any,
) -> None:
    settings.BGTASKS_EVENTS_KEEPALIVE = 0.5
    checks = _SharedChecks()
    made: list[str] = []

    def work(key: str) -> bool:
        made.append(key)
        time.sleep(0.05)  # while the others ask: they wait for this answer
        return key == "session:a"

    def ask(key: str) -> bool:
        return checks.check(key, lambda: work(key))

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(ask, ["session:a"] * 10 + ["session:b"] * 10))
    assert answers == [True] * 10 + [False] * 10
    assert sorted(made) == ["session:a", "session:b"]
    assert checks.fresh("session:a") is True and checks.fresh("session:c") is None
    time.sleep(0.6)  # the answer is no longer fresh: the next asker checks again
    assert checks.fresh("session:a") is None
    assert ask("session:a") is True and made.count("session:a") == 2
