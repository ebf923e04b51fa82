"""The admin's dashboard (admin/dashboard.py), on the surfaces' engines: the
charts and tables of the rollup's numbers for the cluster, a queue and a
task path; what is true now; the link from the app's index and the list;
who may see it; a bad window or scope refused with a 400; and a bounded
number of queries, whatever the rollup holds."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_bgtasks.conf import conf
from django_bgtasks.models import QueueRollup
from tests.dbtools import ended_a_minute_ago

UTC = dt.UTC


def _client(make_staff: Any, name: str, *codenames: str, superuser: bool = False) -> Client:
    client = Client()
    client.force_login(make_staff(name, *codenames, superuser=superuser))
    return client


def test_the_dashboard_charts_the_rollup_and_shows_now(
    tasks_site_alias: str, make_staff: Any
) -> None:
    url = reverse("admin:django_bgtasks_dashboard")
    root = _client(make_staff, "root", superuser=True)
    ended_a_minute_ago(tasks_site_alias)
    page = root.get(url)
    assert page.status_code == 200
    text = page.content.decode()
    board = page.context["board"]
    assert (board.totals.succeeded, board.totals.failed) == (3, 1)
    # (The minute of the four is the last one rolled up, or the one before
    # where the clock passed a minute while the helper rolled up.)
    assert len(board.points) == 60 and [p.ended for p in board.points if p.ended] == [4]
    # The four charts, each an inline SVG with a bar or a point a minute.
    keys = re.findall(r'<svg id="bgtasks-chart-([a-z-]+)"', text)
    assert keys == ["ended", "failure-ratio", "lag", "run-time"]
    assert text.count("<rect ") == 2  # the last minute: succeeded, failed
    assert "25%" in text  # its failure ratio, in a point's title
    assert re.search(r"p50 1\d(\.\d)? ms", text)  # 15 ms: linear within its bucket
    # Now: the ready task's queue, and the tables of the window.
    assert [row["name"] for row in page.context["queues_now"]] == ["default", "other"]
    assert [(t.name, t.succeeded, t.failed) for t in board.queues] == [
        ("default", 3, 0),
        ("other", 0, 1),
    ]
    assert [t.name for t in board.tasks] == ["tests.djtasks.echo"]
    assert 'data-bgtasks-refresh="10.0"' in text

    # A queue's charts, a task path's (no lag: it is a queue's), the day's.
    other = root.get(url, {"queue": "other"}).context["board"]
    assert (other.totals.succeeded, other.totals.failed) == (0, 1)
    by_task = root.get(url, {"task": "tests.djtasks.echo"})
    assert re.findall(r'<svg id="bgtasks-chart-([a-z-]+)"', by_task.content.decode()) == [
        "ended",
        "failure-ratio",
        "run-time",
    ]
    day = root.get(url, {"window": "day"}).context["board"]
    assert 92 <= len(day.points) <= 96 and day.points[0].minutes == 15
    assert (day.totals.succeeded, day.totals.failed) == (3, 1)
    assert [(t.name, t.failed) for t in day.queues] == [("default", 0), ("other", 1)]

    # Linked from the app's index and from the list.
    assert url in root.get(reverse("admin:app_list", args=["django_bgtasks"])).content.decode()
    assert url in root.get(reverse("admin:django_bgtasks_queuedtask_changelist")).content.decode()


def test_the_dashboard_before_any_rollup_says_so(tasks_site_alias: str, make_staff: Any) -> None:
    root = _client(make_staff, "root", superuser=True)
    text = root.get(reverse("admin:django_bgtasks_dashboard")).content.decode()
    assert "No worker has rolled the finished tasks up yet" in text
    QueueRollup.objects.using(conf.DATABASE).create(
        span=60, start=dt.datetime(2026, 1, 1, tzinfo=UTC)
    )
    text = root.get(reverse("admin:django_bgtasks_dashboard")).content.decode()
    assert "no worker of the queue has run since" in text


def test_bad_windows_and_scopes_are_refused(tasks_site_alias: str, make_staff: Any) -> None:
    url = reverse("admin:django_bgtasks_dashboard")
    root = _client(make_staff, "root", superuser=True)
    for query, said in [
        ({"window": "week"}, "unknown window &#x27;week&#x27;"),
        ({"queue": "default", "task": "tests.djtasks.echo"}, "not both"),
    ]:
        page = root.get(url, query)
        assert page.status_code == 400
        assert said in page.content.decode()
        assert "bgtasks-chart" not in page.content.decode()
    assert not QueueRollup.objects.using(conf.DATABASE).exists()


def test_who_may_see_the_dashboard(tasks_site_alias: str, make_staff: Any, settings: Any) -> None:
    url = reverse("admin:django_bgtasks_dashboard")
    assert Client().get(url).status_code == 302  # to the login
    nobody = _client(make_staff, "nobody")
    assert nobody.get(url).status_code == 403
    viewer = _client(make_staff, "viewer", "view_backgroundtask")
    assert viewer.get(url).status_code == 200
    # A site without a LeaseBackend has no Django tasks, and no dashboard.
    settings.TASKS = {"default": {"BACKEND": settings.IMMEDIATE_BACKEND}}
    assert viewer.get(url).status_code == 404
    index = viewer.get(reverse("admin:app_list", args=["django_bgtasks"])).content.decode()
    assert url not in index


def test_the_dashboard_reads_a_bounded_number_of_statements(
    tasks_site_alias: str, make_staff: Any
) -> None:
    url = reverse("admin:django_bgtasks_dashboard")
    root = _client(make_staff, "root", superuser=True)
    ended_a_minute_ago(tasks_site_alias)
    counted = []
    for _ in range(2):
        with CaptureQueriesContext(connections[conf.DATABASE]) as queries:
            assert root.get(url, {"window": "day"}).status_code == 200
        counted.append(len(queries))
        ended_a_minute_ago(tasks_site_alias)  # more rows, more tasks
    assert counted[0] == counted[1]
