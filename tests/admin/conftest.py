"""What the admin's tests share: the logged-in client of a superuser (users
live in "default", whatever database the tasks are on; view-only staff's,
``viewer``, is tests/conftest.py's), the URLs of a background task's page
and operator views, the changelist's actions, a row of its page, the
messages a response carries, and the changes the admin logged (its
``LogEntry``).

The helpers are fixtures, each the function a test calls: ``url("cleanup",
"cancel")``, ``messages_of(response)``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client

CHANGELIST = "/admin/django_bgtasks/backgroundtask/"


@pytest.fixture
def superuser(make_staff: Any) -> Client:
    client = Client()
    client.force_login(make_staff("root", superuser=True))
    return client


def _url(name: str, operation: str) -> str:
    from django.urls import reverse

    return reverse(f"admin:django_bgtasks_backgroundtask_{operation}", args=[name])


def _change_url(name: str) -> str:
    from django.contrib.admin.utils import quote

    return f"{CHANGELIST}{quote(name)}/change/"


def _messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def _logged() -> list[tuple[str, str]]:
    return [
        (entry.object_id, entry.change_message)
        for entry in LogEntry.objects.order_by("pk")
        if entry.action_flag == CHANGE
    ]


def _row_of(html: str, name: str) -> str:
    """The changelist's row (``<tr>…</tr>``) whose checkbox selects ``name``."""
    table = html[html.index('<table id="result_list">') :]
    for row in re.findall(r"<tr>(.*?)</tr>", table[: table.index("</table>")], re.S):
        if f'name="_selected_action" value="{name}"' in row:
            return str(row)
    raise AssertionError(f"no row for {name!r}")


def _action(client: Client, name: str, *selected: str, **extra: str) -> Any:
    data = {"action": name, "_selected_action": list(selected), "index": "0", **extra}
    return client.post(CHANGELIST, data, follow=True)


@pytest.fixture
def url() -> Callable[[str, str], str]:
    """``url(name, operation)``: a task's operator view, "run", "cancel" or "release"."""
    return _url


@pytest.fixture
def change_url() -> Callable[[str], str]:
    """``change_url(name)``: a task's page."""
    return _change_url


@pytest.fixture
def messages_of() -> Callable[[Any], list[str]]:
    """``messages_of(response)``: the texts of the messages it shows."""
    return _messages_of


@pytest.fixture
def logged() -> Callable[[], list[tuple[str, str]]]:
    """``logged()``: each change the admin logged, ``(task name, message)``, oldest first."""
    return _logged


@pytest.fixture
def row_of() -> Callable[[str, str], str]:
    """``row_of(html, name)``: the changelist's row of ``name``."""
    return _row_of


@pytest.fixture
def action() -> Callable[..., Any]:
    """``action(client, name, *selected, **extra)``: the changelist's action
    ``name`` on the tasks named, posted by ``client`` (the response, its
    redirect followed)."""
    return _action
