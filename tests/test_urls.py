"""The JSON API's routes (django_bgtasks.urls, mounted at /bgtasks/ by
tests/urls.py): each documented name reverses to its path and back; the
fixed routes come before a task's ``<name>/``, which keeps its writes; and
every other path ending in "/" is the API's JSON 404, while a path without
its slash still gets ``APPEND_SLASH``'s redirect."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.urls import resolve, reverse

from django_bgtasks import urls
from django_bgtasks.http import api
from tests.http.test_api import assert_json_error

RESULT_ID = "00000000-0000-4000-8000-000000000000"
# The names django_bgtasks/urls.py's docstring documents, with their arguments and paths.
DOCUMENTED = [
    ("list", [], "/bgtasks/"),
    ("task", ["cleanup"], "/bgtasks/cleanup/"),
    ("run", ["cleanup"], "/bgtasks/cleanup/run/"),
    ("cancel", ["cleanup"], "/bgtasks/cleanup/cancel/"),
    ("pause", ["cleanup"], "/bgtasks/cleanup/pause/"),
    ("unpause", ["cleanup"], "/bgtasks/cleanup/unpause/"),
    ("django-tasks", [], "/bgtasks/django-tasks/"),
    ("django-task", [RESULT_ID], f"/bgtasks/django-tasks/{RESULT_ID}/"),
    ("django-task-cancel", [RESULT_ID], f"/bgtasks/django-tasks/{RESULT_ID}/cancel/"),
    ("django-task-retry", [RESULT_ID], f"/bgtasks/django-tasks/{RESULT_ID}/retry/"),
    ("django-tasks-pause", [], "/bgtasks/django-tasks/queues/pause/"),
    ("django-tasks-unpause", [], "/bgtasks/django-tasks/queues/unpause/"),
    ("django-tasks-retry", [], "/bgtasks/django-tasks/retry/"),
    ("django-tasks-cancel", [], "/bgtasks/django-tasks/cancel/"),
    ("django-tasks-delete", [], "/bgtasks/django-tasks/delete/"),
    ("metrics", [], "/bgtasks/metrics/"),
    ("ready", [], "/bgtasks/ready/"),
]


def test_every_documented_name_reverses_to_its_path_and_back() -> None:
    assert urls.app_name == "bgtasks"
    for name, args, path in DOCUMENTED:
        assert reverse(f"bgtasks:{name}", args=args) == path, name
        assert resolve(path).view_name == f"bgtasks:{name}", path


def test_the_fixed_routes_come_before_a_task_s_and_a_task_keeps_its_writes() -> None:
    # GET of a task named like a fixed route reaches the fixed route.
    for path, name in [
        ("/bgtasks/events/", "events"),
        ("/bgtasks/metrics/", "metrics"),
        ("/bgtasks/ready/", "ready"),
        ("/bgtasks/workers/", "workers"),
        ("/bgtasks/django-tasks/", "django-tasks"),
    ]:
        assert resolve(path).view_name == f"bgtasks:{name}", path
    # Its run is still its own.
    for task in ("events", "metrics", "ready", "workers", "django-tasks"):
        found = resolve(f"/bgtasks/{task}/run/")
        assert (found.view_name, found.kwargs) == ("bgtasks:run", {"name": task})
    # A Django Task's id that is no UUID reaches its view (for its JSON 404),
    # and so does a path no route names.
    found = resolve("/bgtasks/django-tasks/not-a-uuid/")
    assert (found.func, found.kwargs) == (api.queued_detail, {"result_id": "not-a-uuid"})
    assert resolve("/bgtasks/a/b/c/").func is api.no_endpoint


def test_a_path_no_endpoint_has_is_a_json_404_whatever_the_method(
    site_alias: str, make_staff: Any
) -> None:
    viewer = Client(enforce_csrf_checks=True)
    viewer.force_login(make_staff("lost-viewer", "view_backgroundtask"))
    for path in ("/bgtasks/a/b/c/", "/bgtasks/django-tasks/x/y/", "/bgtasks/some-task/run/now/"):
        body = assert_json_error(viewer.get(path), 404)
        assert body["error"] == f"No endpoint of the bgtasks API at {path!r}."
        # Refused first as at any endpoint: no access, or a write without its token.
        assert_json_error(Client().get(path), 403)
        for method in ("post", "put", "delete"):
            body = assert_json_error(getattr(viewer, method)(path), 403)
            assert body["error"].startswith("CSRF verification failed")
    # Without its slash, a path is still mended by APPEND_SLASH (not taken here).
    response = viewer.get("/bgtasks/django-tasks")
    assert response.status_code == 301 and response["Location"] == "/bgtasks/django-tasks/"
