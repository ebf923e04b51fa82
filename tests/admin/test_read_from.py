"""The admin's lists and dashboard read from a replica (admin/read_from.py,
``BGTASKS_READ_DATABASE``), against a real streaming standby of the embedded
PostgreSQL (tests/replica.py): each page says how far behind it may be, or,
when the replica was not read, warns that the primary was, and why; a
task's own page is the primary's."""

from __future__ import annotations

import time
from typing import Any

from django.contrib import messages
from django.test import Client

from tests.db.test_read_database import enqueue, received
from tests.replica import Standby

QUEUED = "/admin/django_bgtasks/queuedtask/"
PAGES = (QUEUED, "/admin/django_bgtasks/backgroundtask/", f"{QUEUED}dashboard/")


def _said(page: Any) -> list[tuple[int, str]]:
    """The page's messages about where it read, with their level."""
    return [
        (message.level, str(message))
        for message in page.context["messages"]
        if str(message).startswith("Read from")
    ]


def _listed(page: Any) -> list[str]:
    return [str(row.uuid) for row in page.context["cl"].result_list]


def test_each_page_says_how_far_behind_the_replica_it_read_may_be(
    read_replica: Standby, viewer: Client, settings: Any
) -> None:
    first = enqueue(1)
    # Replayed: the standby's last replayed commit is then this one, a
    # fresh one (a standby that has replayed none since it started, and is
    # behind, can't say how far: it is not read).
    read_replica.wait_caught_up()
    read_replica.pause_replay()
    try:
        second = enqueue(2)
        received(read_replica)
        time.sleep(0.2)
        for url in PAGES:
            page = viewer.get(url)
            assert page.status_code == 200, url
            [(level, text)] = _said(page)
            assert level == messages.INFO, url
            assert text.startswith("Read from the replica 'replica', up to "), url
            assert text.endswith(" s behind the primary."), url
        assert _listed(viewer.get(QUEUED)) == [first]
        own = viewer.get(f"{QUEUED}{second}/change/")
        assert own.status_code == 200 and _said(own) == []  # the primary's, unsaid

        settings.BGTASKS_READ_MAX_LAG = 0.1
        page = viewer.get(QUEUED)
        assert _listed(page) == [second, first]
        [(level, text)] = _said(page)
        assert level == messages.WARNING
        assert text.startswith("Read from the primary: the replica 'replica' may be ")
        assert text.endswith("more than BGTASKS_READ_MAX_LAG (0.1 s).")
    finally:
        read_replica.resume_replay()


def test_a_replica_down_is_warned_of(read_replica: Standby, viewer: Client) -> None:
    task = enqueue(1)
    read_replica.stop()
    try:
        for url in PAGES:
            page = viewer.get(url)
            assert page.status_code == 200, url
            [(level, text)] = _said(page)
            assert level == messages.WARNING, url
            assert text.startswith("Read from the primary: the replica 'replica' can't be read")
        assert _listed(viewer.get(QUEUED)) == [task]
    finally:
        read_replica.start()
