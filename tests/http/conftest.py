"""What the HTTP surfaces' tests share: the logged-in client of an operator
with the change permission (users live in "default", whatever database the
tasks are on; view-only staff's, ``viewer``, is tests/conftest.py's), and,
for the event stream's tests, a uvicorn server on the test databases with
short keepalives and polls (``FAST``) and a view-only staff member's session
cookie."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from tests.asgiserver import uvicorn


@pytest.fixture
def operator(make_staff: Any) -> Client:
    client = Client()
    client.force_login(make_staff("operator", "change_backgroundtask"))
    return client


FAST = {"BGTASKS_EVENTS_KEEPALIVE": 0.5, "BGTASKS_CHANGES_POLL_INTERVAL": 0.05}


@pytest.fixture
def server(site_alias: str) -> Iterator[str]:
    with uvicorn(sorted({"default", site_alias}), BGTASKS_DATABASE=site_alias, **FAST) as host:
        yield host


@pytest.fixture
def staff_cookie(make_staff: Callable[..., Any]) -> str:
    client = Client()
    client.force_login(make_staff("watcher", "view_backgroundtask"))
    return f"sessionid={client.cookies['sessionid'].value}"
