"""What the HTTP surfaces' tests share: the logged-in clients of the JSON API
(view-only staff, and an operator with the change permission; users live in
"default", whatever database the tasks are on)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client


@pytest.fixture
def viewer(make_staff: Any) -> Client:
    client = Client()
    client.force_login(make_staff("viewer", "view_backgroundtask"))
    return client


@pytest.fixture
def operator(make_staff: Any) -> Client:
    client = Client()
    client.force_login(make_staff("operator", "change_backgroundtask"))
    return client
