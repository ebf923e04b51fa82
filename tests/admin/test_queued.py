"""The Django tasks' ModelAdmin (admin/queued.py), on the surfaces' engines:
a task's page found by its id, an old link by the row's sequence number
sent on to it, the Django tasks shown only where a LeaseBackend is
configured, and no row saved, neither by a page's POST nor by any other
way (BackgroundTaskAdmin's save_model() too, admin/options.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_bgtasks.models import BackgroundTask

objects = BackgroundTask.objects
CHANGELIST = "/admin/django_bgtasks/backgroundtask/"
QUEUED = "/admin/django_bgtasks/queuedtask/"


def test_a_django_task_is_found_by_its_id_and_old_links_follow_it(
    tasks_site_alias: str, superuser: Client, make_staff: Any, messages_of: Any
) -> None:
    """get_result()'s id, the API's and the admin's URL are one: the
    result's UUID. A link by the row's sequence number (the primary key,
    which these URLs carried before) is sent on to it."""
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    result = djtasks.add.enqueue(1, 2)
    seq = QueuedTask.objects.using(tasks_site_alias).get(uuid=result.id).seq
    page = f"{QUEUED}{result.id}/change/"
    assert superuser.get(f"/bgtasks/django-tasks/{result.id}/").json()["id"] == result.id
    assert f'<a href="{page}">{result.id}</a>' in superuser.get(QUEUED).content.decode()
    detail = superuser.get(page)
    assert detail.status_code == 200 and result.id in detail.content.decode()
    assert superuser.get(f"{QUEUED}{result.id}/history/").status_code == 200

    for old, new in [
        (f"{QUEUED}{seq}/change/", page),
        (f"{QUEUED}{seq}/history/", f"{QUEUED}{result.id}/history/"),
    ]:
        response = superuser.get(old)
        assert (response.status_code, response["Location"]) == (302, new)
    assert superuser.get(f"{QUEUED}{seq}/", follow=True).redirect_chain[-1] == (page, 302)

    gone = "No Django task has the id “{}”: it never existed, or it finished more than " + (
        "BGTASKS_HISTORY_DAYS ago and bgtasks prune deleted it."
    )
    for missing in ("00000000-0000-4000-8000-000000000000", str(seq + 1000)):
        response = superuser.get(f"{QUEUED}{missing}/change/", follow=True)
        assert response.redirect_chain == [(QUEUED, 302)]
        assert messages_of(response) == [gone.format(missing)]
    response = superuser.get(f"{QUEUED}add/change/", follow=True)
    assert messages_of(response) == [
        "“add” is not a Django task's id: that is the UUID of its result "
        "(get_result().id, the JSON API's “id”, bgtasks show)."
    ]

    # Who may not see Django tasks learns nothing, not even where one went.
    stranger = Client()
    stranger.force_login(make_staff("stranger"))
    for old in (page, f"{QUEUED}{seq}/change/", f"{QUEUED}{seq}/history/"):
        assert stranger.get(old).status_code == 403


def test_django_tasks_are_shown_only_where_a_lease_backend_is_configured(
    tasks_site_alias: str, superuser: Client, settings: Any
) -> None:
    """A site whose TASKS has no LeaseBackend (or no TASKS at all, on
    Django 5.2 without the backport) has no Django tasks here to show."""
    assert "Django tasks" in superuser.get("/admin/").content.decode()
    settings.TASKS = {"default": {"BACKEND": settings.IMMEDIATE_BACKEND}}
    for page in ("/admin/", "/admin/django_bgtasks/", CHANGELIST):
        html = superuser.get(page).content.decode()
        assert "Django tasks" not in html and QUEUED not in html, page
    del settings.TASKS
    assert "Django tasks" not in superuser.get("/admin/").content.decode()


def test_nobody_can_save_a_django_task(tasks_site_alias: str, superuser: Client) -> None:
    """A Save rewrites the whole row with the values it read, outside every
    fence (raced against a finishing task, it set it back to RUNNING): the
    change page of a Django task is a view, for superusers too."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    result = djtasks.add.enqueue(1, 2)
    claim = QueuedTask.objects.claim("admin-test-worker", queues=None)
    assert claim is not None and execute(claim) == "SUCCESSFUL"
    table = QueuedTask.objects.using(tasks_site_alias)
    before = table.filter(uuid=result.id).values().get()
    page = f"{QUEUED}{result.id}/change/"

    detail = superuser.get(page)
    assert detail.status_code == 200
    html = detail.content.decode()
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    altered = {
        **{name: str(value) for name, value in before.items() if value is not None},
        "status": "RUNNING",
        "return_value": "99",
        "finished_at": "",
        "_save": "Save",
    }
    with CaptureQueriesContext(connections[tasks_site_alias]) as queries:
        response = superuser.post(page, altered)
    assert response.status_code == 403
    assert table.filter(uuid=result.id).values().get() == before
    table_name = QueuedTask._meta.db_table
    writes = [
        query["sql"]
        for query in queries.captured_queries
        if table_name in query["sql"] and not query["sql"].lstrip().upper().startswith("SELECT")
    ]
    assert writes == []


def test_neither_admin_saves_a_row_by_any_way(tasks_site_alias: str, superuser: Client) -> None:
    """Whatever calls the admins' save_model() (a ``list_editable`` added
    later, a subclass's view), it refuses: only the fenced operations write."""
    from django.contrib import admin
    from django.core.exceptions import PermissionDenied
    from django.test import RequestFactory

    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    objects.try_claim("cleanup", "worker-1", ttl=30)
    result = djtasks.add.enqueue(1, 2)
    request = RequestFactory().post("/")
    for model, row in (
        (BackgroundTask, BackgroundTask.objects.using(tasks_site_alias).get(name="cleanup")),
        (QueuedTask, QueuedTask.objects.using(tasks_site_alias).get(uuid=result.id)),
    ):
        before = model._default_manager.using(tasks_site_alias).values().get(pk=row.pk)
        row.owner = "me"
        with pytest.raises(PermissionDenied):
            admin.site._registry[model].save_model(request, row, None, True)
        assert model._default_manager.using(tasks_site_alias).values().get(pk=row.pk) == before
