"""The JSON status API's views (django_bgtasks.http.api, mounted at /bgtasks/
by django_bgtasks.urls): reads, run, cancel and pause, and Django Tasks'
list, queues, detail, cancel and retry, with each status code, on each
database.

What every view shares has its own module: who may (test_access.py), the
bodies of the writes (test_forms.py), the list's query and pages
(django_bgtasks.http.paging: test_paging.py), ETag/304, the JSON 405 and 503
and ATOMIC_REQUESTS (test_responses.py), the bulk actions (test_bulk.py), and
the routes (tests/test_urls.py)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.test import Client

from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.core.leases import TaskState
from django_bgtasks.models import BackgroundTask
from tests.dbtools import a_worker_runs, backdate, rows, runs

objects = BackgroundTask.objects
STATE_KEYS = set(TaskState.__dataclass_fields__) | {"status", "progress"}


def post_json(client: Client, url: str, data: Any = None, **extra: Any) -> Any:
    body = "" if data is None else json.dumps(data)
    return client.post(url, body, content_type="application/json", **extra)


# --- reads -----------------------------------------------------------------------------


def test_a_timed_out_run_reads_so_in_the_api(site_alias: str, viewer: Client) -> None:
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    error = "task 'cleanup' timed out: it ran past its 2 s"
    objects.release("cleanup", "worker-1", token=lease.token, outcome="timed-out", error=error)
    data = viewer.get("/bgtasks/cleanup/").json()
    assert (data["outcome"], data["error"], data["running"]) == ("timed-out", error, False)


def test_list_and_detail_return_task_states(site_alias: str, viewer: Client) -> None:
    lease = objects.try_claim("cleanup", "worker-1", {"done": 3, "total": 4}, ttl=30)
    objects.try_claim("other", "worker-2", ttl=30)

    listing = viewer.get("/bgtasks/")
    assert listing.status_code == 200
    # Every task with a row, and every registered task (these never ran), by name.
    names = [task["name"] for task in listing.json()["tasks"]]
    assert names == sorted({"cleanup", "other", *registered_tasks()})
    assert set(listing.json()) == {"tasks", "read_from"}
    listed = {task["name"]: task for task in listing.json()["tasks"]}

    detail = viewer.get("/bgtasks/cleanup/")
    assert detail.status_code == 200
    data = detail.json()
    assert set(data) == STATE_KEYS  # task state and nothing else
    assert data == listed["cleanup"] | {"heartbeat_age": data["heartbeat_age"]}
    assert (data["owner"], data["token"], data["status"], data["progress"]) == (
        "worker-1",
        lease.token,
        "running",
        0.75,
    )
    assert isinstance(data["heartbeat_age"], float) and 0 <= data["heartbeat_age"] < 5
    assert data["started_at"] == objects.get_state("cleanup").started_at.isoformat()
    assert data["finished_at"] is None


def test_registered_tasks_are_listed_and_shown_before_their_first_run(
    site_alias: str, viewer: Client, settings: Any
) -> None:
    settings.BGTASKS_SCHEDULES = {"surface-slow": dt.timedelta(minutes=5)}
    objects.try_claim("cleanup", "worker-1", ttl=30)  # a row, for no registered task

    listed = {task["name"]: task for task in viewer.get("/bgtasks/").json()["tasks"]}
    quick = listed["surface-quick"]
    assert (quick["status"], quick["token"], quick["running"], quick["owner"]) == (
        "never run",
        0,
        False,
        "",
    )
    assert (quick["ttl"], quick["started_at"], quick["result"], quick["value"]) == (
        30.0,
        None,
        None,
        None,
    )
    # A registered task's schedule (as workers follow it) and description.
    assert (quick["schedule"], quick["description"]) == (
        "",
        "Counts to three, reporting each step.",
    )
    assert listed["surface-slow"]["schedule"] == "every 300s"
    assert set(quick) == STATE_KEYS | {"schedule", "description"}
    assert set(listed["cleanup"]) == STATE_KEYS  # not registered: the state alone

    detail = viewer.get("/bgtasks/surface-quick/")
    assert detail.status_code == 200 and detail.json() == quick
    assert detail["ETag"]
    assert [row["name"] for row in rows(site_alias)] == ["cleanup"]  # reads write nothing
    assert viewer.get("/bgtasks/never-registered/").status_code == 404


def test_the_run_result_is_in_the_state(site_alias: str, operator: Client, settle: Any) -> None:
    assert post_json(operator, "/bgtasks/surface-quick/run/").status_code == 202
    settle("surface-quick")
    data = operator.get("/bgtasks/surface-quick/").json()
    assert (data["status"], data["result"], data["result_note"]) == ("idle", {"counted": 3}, "")


def test_an_unknown_task_is_404_and_a_bad_name_is_400(site_alias: str, viewer: Client) -> None:
    response = viewer.get("/bgtasks/nope/")
    assert response.status_code == 404
    assert response.json() == {"error": "No task named 'nope' has run."}

    for bad in ("%20padded", "x" * 201, "tab%09in"):
        response = viewer.get(f"/bgtasks/{bad}/")
        assert response.status_code == 400, bad
        assert set(response.json()) == {"error"}


def test_reads_refuse_other_methods(site_alias: str, operator: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    assert operator.post("/bgtasks/cleanup/").status_code == 405
    assert operator.delete("/bgtasks/").status_code == 405
    head = operator.head("/bgtasks/cleanup/")
    assert head.status_code == 200 and head["ETag"]


def test_a_stale_holder_reads_as_stale(site_alias: str, viewer: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    backdate(site_alias, "cleanup", 45)

    data = viewer.get("/bgtasks/cleanup/").json()
    assert (data["running"], data["stale"], data["status"]) == (False, True, "stale")
    assert data["heartbeat_age"] >= 45


# --- run -----------------------------------------------------------------------------------


def test_run_starts_a_registered_task_and_answers_202(
    site_alias: str, operator: Client, settle: Any
) -> None:
    response = post_json(operator, "/bgtasks/surface-quick/run/")

    assert response.status_code == 202
    assert response["Location"] == "/bgtasks/surface-quick/"
    data = response.json()
    assert set(data) == STATE_KEYS and data["token"] == 1
    state = settle("surface-quick")
    assert (state.outcome, state.value, state.token) == ("succeeded", {"done": 3, "total": 3}, 1)


def test_run_answers_409_when_the_task_is_held(site_alias: str, operator: Client) -> None:
    objects.try_claim("surface-quick", "worker-1", ttl=30)
    before = rows(site_alias)

    response = post_json(operator, "/bgtasks/surface-quick/run/")

    assert response.status_code == 409
    assert response.json()["error"] == "Task 'surface-quick' is already running on worker-1."
    assert response.json()["state"]["owner"] == "worker-1"
    assert rows(site_alias) == before


def test_run_answers_404_for_a_task_nobody_registered(site_alias: str, operator: Client) -> None:
    objects.try_claim("adhoc", "worker-1", ttl=30)
    objects.force_release("adhoc")  # it has run, under lease(), but is not registered
    before = rows(site_alias)

    for name in ("adhoc", "nope"):
        response = post_json(operator, f"/bgtasks/{name}/run/")
        assert response.status_code == 404
        assert response.json() == {"error": f"No background task is registered as {name!r}."}
    assert rows(site_alias) == before


@pytest.mark.parametrize("executor", ["thread", "worker"])
def test_run_answers_400_with_the_reason_for_a_task_that_needs_arguments(
    site_alias: str, operator: Client, settings: Any, executor: str
) -> None:
    settings.BGTASKS_EXECUTOR = executor
    before = (rows(site_alias), runs(site_alias))

    response = post_json(operator, "/bgtasks/surface-sum/run/")  # surface-sum(lease, numbers)

    assert response.status_code == 400
    assert response.json() == {
        "error": "task 'surface-sum' can't take these arguments: "
        "missing a required argument: 'numbers'"
    }
    assert (rows(site_alias), runs(site_alias)) == before


def test_a_run_for_a_worker_answers_404_unless_a_worker_can_run_it(
    site_alias: str, operator: Client, settings: Any
) -> None:
    settings.BGTASKS_EXECUTOR = "worker"
    objects.try_claim("adhoc", "worker-1", ttl=30)
    objects.force_release("adhoc")  # it has run, under lease(): no worker runs it
    before = rows(site_alias)
    for name in ("adhoc", "nope"):
        response = post_json(operator, f"/bgtasks/{name}/run/")
        assert response.status_code == 404
        assert response.json() == {"error": f"No background task is registered as {name!r}."}
    assert rows(site_alias) == before

    a_worker_runs("nope")  # a worker registers it, this process does not
    response = post_json(operator, "/bgtasks/nope/run/")
    assert response.status_code == 202 and response.json()["status"] == "requested"


def test_run_for_a_worker_files_the_arguments(
    site_alias: str, operator: Client, settings: Any
) -> None:
    settings.BGTASKS_EXECUTOR = "worker"
    response = post_json(operator, "/bgtasks/surface-sum/run/", {"kwargs": {"numbers": [4]}})

    assert response.status_code == 202 and response.json()["status"] == "requested"
    row = objects.get(name="surface-sum")
    assert (row.request, row.requested_by) == (
        {"args": [], "kwargs": {"numbers": [4]}},
        "api: operator",
    )


def test_run_answers_400_for_a_bad_name(site_alias: str, operator: Client) -> None:
    response = post_json(operator, "/bgtasks/%20surface-quick/run/")
    assert response.status_code == 400
    assert "whitespace" in response.json()["error"]
    assert rows(site_alias) == []


def test_run_and_cancel_need_post(site_alias: str, operator: Client) -> None:
    assert operator.get("/bgtasks/surface-quick/run/").status_code == 405
    assert operator.get("/bgtasks/surface-quick/cancel/").status_code == 405
    assert rows(site_alias) == []


# --- cancel ------------------------------------------------------------------------------


def test_cancel_asks_the_holder_to_stop(site_alias: str, operator: Client) -> None:
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)

    response = post_json(operator, "/bgtasks/cleanup/cancel/")

    assert response.status_code == 202
    assert response["Location"] == "/bgtasks/cleanup/"
    assert (response.json()["cancel_requested"], response.json()["status"]) == (
        True,
        "cancel requested",
    )
    renewal = objects.renew("cleanup", "worker-1", token=lease.token)
    assert renewal is not None and renewal.cancel_requested


def test_cancel_answers_409_when_nobody_holds_it_and_404_when_unknown(
    site_alias: str, operator: Client
) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.force_release("cleanup")
    before = rows(site_alias)

    response = post_json(operator, "/bgtasks/cleanup/cancel/")
    assert response.status_code == 409
    assert response.json()["error"] == "Task 'cleanup' is not running."
    assert post_json(operator, "/bgtasks/nope/cancel/").status_code == 404
    assert post_json(operator, "/bgtasks/%20x/cancel/").status_code == 400
    assert rows(site_alias) == before


def test_cancel_with_a_token_asks_only_that_run(site_alias: str, operator: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.force_release("cleanup")
    objects.try_claim("cleanup", "worker-2", ttl=30)  # token 2 took over
    before = rows(site_alias)

    response = post_json(operator, "/bgtasks/cleanup/cancel/", {"token": 1})
    assert response.status_code == 409
    assert response.json()["error"] == "Task 'cleanup' is no longer run by token 1 (now 2)."
    for body in ({"token": "1"}, {"token": 0}, {"token": True}, {"ttl": 3}, [1]):
        assert post_json(operator, "/bgtasks/cleanup/cancel/", body).status_code == 400, body
    form = operator.post("/bgtasks/cleanup/cancel/", {"token": "one"})
    assert form.status_code == 400
    assert form.json()["error"] == "token must be a whole number, not 'one'"
    assert rows(site_alias) == before

    response = operator.post("/bgtasks/cleanup/cancel/", {"token": "2"})
    assert response.status_code == 202
    assert response.json()["cancel_requested"] is True


def test_cancel_stops_a_running_task(site_alias: str, operator: Client, settle: Any) -> None:
    assert post_json(operator, "/bgtasks/surface-slow/run/").status_code == 202
    assert post_json(operator, "/bgtasks/surface-slow/cancel/").status_code == 202
    state = settle("surface-slow")
    assert state.outcome == "cancelled"
    assert state.value["done"] < state.value["total"]


# --- Django Tasks (LeaseBackend) ----------------------------------------------------------


def test_the_queues_each_with_its_pause_and_its_tasks_by_status(
    tasks_site_alias: str, make_staff: Any
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    viewer = Client()
    viewer.force_login(make_staff("queue-viewer", "view_backgroundtask"))
    assert viewer.get("/bgtasks/django-tasks/queues/").json()["queues"] == []
    first = djtasks.add.enqueue(1, 2)
    djtasks.add.enqueue(3, 4)
    djtasks.add.using(queue_name="other").enqueue(5, 6)
    claim = QueuedTask.objects.claim("w", queues=["default"])
    assert claim is not None and str(claim.uuid) == first.id
    assert QueuedTask.objects.finish(claim, status="SUCCESSFUL", return_value="3")
    assert QueuedTask.objects.pause_queue("other")
    assert QueuedTask.objects.pause_queue("emptied")  # paused, with no task
    answer = viewer.get("/bgtasks/django-tasks/queues/").json()["queues"]
    assert [(q["name"], q["paused"], q["counts"], q["capped"]) for q in answer] == [
        ("default", False, {"READY": 1, "RUNNING": 0, "SUCCESSFUL": 1, "FAILED": 0}, []),
        ("emptied", True, {"READY": 0, "RUNNING": 0, "SUCCESSFUL": 0, "FAILED": 0}, []),
        ("other", True, {"READY": 1, "RUNNING": 0, "SUCCESSFUL": 0, "FAILED": 0}, []),
    ]
    assert answer[0]["paused_at"] is None and answer[2]["paused_at"] is not None
    # Its tasks say what they wait for.
    [waiting] = viewer.get("/bgtasks/django-tasks/?queue=other").json()["django_tasks"]
    assert waiting["waiting"] == "waiting for its queue to be unpaused"
    assert viewer.get(f"/bgtasks/django-tasks/{first.id}/").json()["waiting"] is None
    # Reading needs the view permission.
    nobody = Client()
    nobody.force_login(make_staff("nobody"))
    assert nobody.get("/bgtasks/django-tasks/queues/").status_code == 403


def test_django_tasks_list_detail_and_cancel(tasks_site_alias: str, make_staff: Any) -> None:

    from tests import djtasks

    result = djtasks.add.using(priority=2).enqueue(1, 2)
    viewer, operator = Client(), Client(enforce_csrf_checks=False)
    viewer.force_login(make_staff("queue-viewer", "view_backgroundtask"))
    operator.force_login(make_staff("queue-operator", "change_backgroundtask"))
    listing = viewer.get("/bgtasks/django-tasks/").json()["django_tasks"]
    assert [(item["id"], item["status"], item["priority"]) for item in listing] == [
        (result.id, "READY", 2)
    ]
    assert viewer.get(f"/bgtasks/django-tasks/{result.id}/").json()["task"] == "tests.djtasks.add"
    missing = "00000000-0000-4000-8000-000000000000"
    assert viewer.get(f"/bgtasks/django-tasks/{missing}/").status_code == 404
    assert viewer.post(f"/bgtasks/django-tasks/{result.id}/cancel/").status_code == 403
    assert Client().get("/bgtasks/django-tasks/").status_code == 403
    cancelled = operator.post(f"/bgtasks/django-tasks/{result.id}/cancel/")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "FAILED"
    assert operator.post(f"/bgtasks/django-tasks/{result.id}/cancel/").status_code == 409
    assert djtasks.add.get_result(result.id).status == "FAILED"


def test_a_failed_django_task_is_retried_and_nothing_else_is(
    tasks_site_alias: str, make_staff: Any, tmp_path: Any
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    failed = djtasks.add.enqueue(1, 2)
    QueuedTask.objects.cancel(failed.id)
    viewer, operator = Client(), Client()
    viewer.force_login(make_staff("queue-viewer", "view_backgroundtask"))
    operator.force_login(make_staff("queue-operator", "change_backgroundtask"))
    url = f"/bgtasks/django-tasks/{failed.id}/retry/"
    table = QueuedTask.objects.using(tasks_site_alias)
    before = list(table.values())
    assert_json_error(viewer.post(url), 403)
    assert_json_error(Client().post(url), 403)
    checked = Client(enforce_csrf_checks=True)
    checked.force_login(make_staff("csrf-operator", "change_backgroundtask"))
    assert_json_error(checked.post(url), 403)  # no CSRF token
    for bad in ("not-a-uuid", f"{failed.id}x", str(failed.id)[:-1]):
        body = assert_json_error(operator.post(f"/bgtasks/django-tasks/{bad}/retry/"), 404)
        assert body["error"] == f"No Django Task has the id {bad!r}: it is not a UUID."
    assert list(table.values()) == before

    retried = operator.post(url)
    assert retried.status_code == 202
    assert retried["Location"] == f"/bgtasks/django-tasks/{failed.id}/"
    body = retried.json()
    assert (body["id"], body["status"], body["max_attempts"]) == (failed.id, "READY", 1)
    assert len(body["errors"]) == 1 and body["finished_at"] is None
    before = list(table.values())
    again = operator.post(url)
    assert again.status_code == 409
    assert again.json()["error"] == (
        "The Django Task is READY, not FAILED: only a failed task is retried."
    )
    assert again.json()["task"]["status"] == "READY"
    missing = operator.post("/bgtasks/django-tasks/00000000-0000-4000-8000-000000000000/retry/")
    assert assert_json_error(missing, 404)["error"].startswith("No Django Task has the id")
    assert list(table.values()) == before

    record = str(tmp_path / "record")
    unique = djtasks.unique_record.enqueue(record, "a")
    QueuedTask.objects.cancel(unique.id)
    holder = djtasks.unique_record.enqueue(record, "b")
    held = operator.post(f"/bgtasks/django-tasks/{unique.id}/retry/")
    assert held.status_code == 409
    assert held.json()["held_by"] == holder.id and held.json()["task"]["status"] == "FAILED"


# --- every answer is JSON: a malformed id -------------------------------------------------


def assert_json_error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json", response.content
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"} and body["error"]
    return body


def test_a_malformed_django_task_id_is_a_json_404_with_nothing_written(
    tasks_site_alias: str, make_staff: Any
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    result = djtasks.add.enqueue(1, 2)
    viewer, operator = Client(), Client()
    viewer.force_login(make_staff("queue-viewer", "view_backgroundtask"))
    operator.force_login(make_staff("queue-operator", "change_backgroundtask"))
    for bad in ("not-a-uuid", "1234", f"{result.id}x"):
        body = assert_json_error(viewer.get(f"/bgtasks/django-tasks/{bad}/"), 404)
        assert body["error"] == f"No Django Task has the id {bad!r}: it is not a UUID."
        assert_json_error(operator.post(f"/bgtasks/django-tasks/{bad}/cancel/"), 404)
        assert_json_error(operator.post(f"/bgtasks/django-tasks/{bad}/retry/"), 404)
        assert_json_error(Client().get(f"/bgtasks/django-tasks/{bad}/"), 403)  # access first
    row = QueuedTask.objects.using(tasks_site_alias).get(uuid=result.id)
    assert (row.status, row.errors) == ("READY", [])
    # A well-formed id is found as before, in whatever case it is written.
    found = viewer.get(f"/bgtasks/django-tasks/{str(result.id).upper()}/")
    assert found.status_code == 200 and found.json()["id"] == str(result.id)


# --- pause -------------------------------------------------------------------------------


def test_pause_and_unpause_a_task(site_alias: str, operator: Client, viewer: Client) -> None:
    assert post_json(viewer, "/bgtasks/surface-quick/pause/").status_code == 403
    assert post_json(Client(), "/bgtasks/surface-quick/pause/").status_code == 403
    assert operator.get("/bgtasks/surface-quick/pause/").status_code == 405
    assert rows(site_alias) == []

    response = post_json(operator, "/bgtasks/surface-quick/pause/")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["changed"]) == ("paused", True)
    assert post_json(operator, "/bgtasks/surface-quick/pause/").json()["changed"] is False
    assert post_json(viewer, "/bgtasks/surface-quick/unpause/").status_code == 403
    assert objects.get_state("surface-quick").status == "paused"
    response = post_json(operator, "/bgtasks/surface-quick/unpause/")
    assert (response.status_code, response.json()["changed"]) == (200, True)
    assert response.json()["status"] == "never run"


def test_pause_refuses_an_unknown_task_and_a_bad_name(site_alias: str, operator: Client) -> None:
    assert post_json(operator, "/bgtasks/nobody-runs-this/pause/").status_code == 404
    assert post_json(operator, "/bgtasks/nobody-runs-this/unpause/").status_code == 404
    assert post_json(operator, "/bgtasks/%20x/pause/").status_code == 400
    assert rows(site_alias) == []


def test_pause_and_unpause_a_queue(
    tasks_site_alias: str, operator: Client, viewer: Client
) -> None:
    from django_bgtasks.models import QueuedTask

    url = "/bgtasks/django-tasks/queues/pause/"
    assert post_json(viewer, url, {"queue": "default"}).status_code == 403
    for bad in (None, {}, {"queue": ""}, {"queue": 3}, {"queue": "default", "name": "x"}):
        assert post_json(operator, url, bad).status_code == 400, bad
    response = post_json(operator, url, {"queue": "nowhere"})
    assert (response.status_code, response.json()["queues"]) == (404, ["default", "other"])
    assert QueuedTask.objects.paused_queues() == {}

    response = operator.post(url, {"queue": "default"})  # a form works as well
    assert response.json() == {"queue": "default", "paused": True, "changed": True}
    assert list(QueuedTask.objects.paused_queues()) == ["default"]
    response = post_json(operator, "/bgtasks/django-tasks/queues/unpause/", {"queue": "default"})
    assert response.json() == {"queue": "default", "paused": False, "changed": True}
    assert QueuedTask.objects.paused_queues() == {}


def test_a_django_tasks_json_has_its_arguments_return_value_errors_and_attempts(
    tasks_site_alias: str, viewer: Client
) -> None:
    """Issue 51, item 5: the API's and ``bgtasks show --json``'s task carries
    what the admin's page shows: its arguments and return value as stored,
    its errors and its attempts; the list's items are the same shape."""
    from io import StringIO

    from django.core.management import call_command

    from tests import djtasks
    from tests.queue.test_backend import run_ready

    added = djtasks.add.enqueue(1, b=2)
    failed = djtasks.fails.enqueue("boom")
    ready = viewer.get(f"/bgtasks/django-tasks/{added.id}/").json()
    assert (ready["args"], ready["kwargs"], ready["return_value"]) == ([1], {"b": 2}, None)
    assert run_ready() == 2
    ok = viewer.get(f"/bgtasks/django-tasks/{added.id}/").json()
    assert (ok["args"], ok["kwargs"], ok["return_value"]) == ([1], {"b": 2}, 3)
    assert (ok["status"], ok["attempts"], ok["errors"]) == ("SUCCESSFUL", 1, [])
    bad = viewer.get(f"/bgtasks/django-tasks/{failed.id}/").json()
    assert (bad["args"], bad["kwargs"], bad["return_value"]) == (["boom"], {}, None)
    assert bad["status"] == "FAILED" and bad["attempts"] == 1
    [error] = bad["errors"]
    assert error["exception_class_path"] == "builtins.ValueError" and "boom" in error["traceback"]
    listed = {
        item["id"]: item for item in viewer.get("/bgtasks/django-tasks/").json()["django_tasks"]
    }
    assert listed[str(added.id)] == ok and listed[str(failed.id)] == bad
    out = StringIO()
    call_command("bgtasks", "show", str(added.id), "--json", stdout=out)
    assert json.loads(out.getvalue()) == ok
