"""The JSON status API, for front ends to poll: ``include("django_bgtasks.urls")``.

* ``GET <prefix>/``: ``{"tasks": [TaskState, ...]}``, every task by name, the
  registered ones that never ran included (status ``never run``);
* ``GET <prefix>/<name>/``: one ``TaskState`` (a registered task's ``never
  run`` one if it has not run), or 404;
* ``POST <prefix>/<name>/run/``: start a registered task here, with the
  body's optional ``args`` and ``kwargs``, 202 (409 when it is held, 404 when
  no task is registered by that name, 400 on bad input, arguments the task
  can't take too); with ``BGTASKS_EXECUTOR = "worker"``, file a request for a
  worker, 202 (409 when one is already pending);
* ``POST <prefix>/<name>/cancel/``: ask the holder to stop, 202 (409 when
  nobody holds it, or when an optional ``token`` no longer does; 404 when the
  task has never run; 400 on bad input);
* ``POST <prefix>/<name>/pause/`` and ``unpause/``: pause the background
  task (workers start nothing of it) or undo it, 200 with its state and
  ``changed`` (false: it was so already); 404 when no process runs it;
* ``GET <prefix>/workers/``: every worker, as ``bgtasks workers --json``;
* Django Tasks (``LeaseBackend``): ``GET <prefix>/django-tasks/``, newest
  first, a page at a time, filtered by ``status``, ``queue``, ``task``,
  ``backend``, ``args``, ``error``, ``key``, ``since`` and ``until``
  (:mod:`django_bgtasks.http.paging`), with the next page's URL;
  ``POST <prefix>/django-tasks/retry/``, ``cancel/`` and ``delete/``: the
  action on every task the body's filter matches (:mod:`django_bgtasks.http.bulk`);
  by result id, ``<id>/``; ``POST <id>/cancel/`` and ``POST <id>/retry/`` (a failed
  task, again: 202; 409 when it is not failed; 404);
  ``GET <prefix>/django-tasks/queues/``: every queue that has tasks or a
  pause, paused or not and its tasks by status; and
  ``POST <prefix>/django-tasks/queues/pause/`` and ``unpause/`` with the
  body's ``queue``: 200 ``{"queue", "paused", "changed"}``, 404 for a queue
  no ``LeaseBackend`` has, 400 without one.

A ``TaskState`` is :meth:`TaskState.as_json`, the shape the ``bgtasks``
command prints too; a GET adds a registered task's ``schedule`` and
``description`` (``task_reads.task_json``). Everything is read from the lease table through
``BackgroundTask.objects`` (with the database's clock), so every replica
answers alike; nothing here keeps state of its own.

Reads need the view permission and writes the change permission, from a
session or a ``BGTASKS_API_AUTHENTICATION`` hook; writes are CSRF-protected
(:mod:`django_bgtasks.http.access`). Their bodies, a JSON object or a form,
are checked by :mod:`django_bgtasks.http.forms`; what they do is
:mod:`django_bgtasks.operations`, which the views only put into status codes
and JSON.

Every answer is JSON (:func:`~django_bgtasks.http.responses.endpoint`): a
wrong method is a 405 with ``Allow``, a CSRF refusal a 403, a Django Task id
that is no UUID a 404, and a ``DatabaseError`` a 503 with ``Retry-After``,
logged. Reads carry a weak ``ETag`` and answer ``If-None-Match`` with 304
(:func:`~django_bgtasks.http.responses.conditional_json`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.urls import reverse

from django_bgtasks.db import read_database
from django_bgtasks.http.access import authenticated, csrf_protect, requires
from django_bgtasks.http.forms import CancelForm, QueueForm, RunForm, post_options
from django_bgtasks.http.paging import list_query, next_url
from django_bgtasks.http.responses import (
    conditional_json,
    endpoint,
    error,
    outside_request_transactions,
    read_list,
    task_list_response,
)
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import pause as pausing
from django_bgtasks.operations import queued, queues, task_reads, writes
from django_bgtasks.operations import workers as worker_views
from django_bgtasks.validation import validate_name

View = TypeVar("View", bound=Callable[..., HttpResponseBase])


def _named(view: View) -> View:
    """Pass the URL's task name on checked, or answer 400 for a malformed one."""

    @wraps(view)
    def checked(request: HttpRequest, name: str, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            name = validate_name(name)
        except ValueError as exc:
            return error(400, str(exc))
        return view(request, name, *args, **kwargs)

    return checked  # type: ignore[return-value]


def _operation(view: View) -> View:
    """A write: POST only, CSRF-protected (unless a hook authenticated it; the
    site's ``CsrfViewMiddleware`` is told to leave the check to this), for
    the change permission, on a well-formed name, and outside ``ATOMIC_REQUESTS``."""
    return outside_request_transactions(
        endpoint("POST")(authenticated(csrf_protect(requires("change")(_named(view)))))
    )


def _accepted(name: str, body: dict[str, Any]) -> HttpResponse:
    """202 with ``body`` (the task's state), and where to poll it."""
    response = JsonResponse(body, status=202)
    response.headers["Location"] = reverse("bgtasks:task", args=[name])
    return response


@endpoint("GET", "HEAD")
@authenticated
@requires("view")
def task_list(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/``: every task's state, the registered ones that never ran too."""
    return task_list_response(request, never_run=True)


@endpoint("GET", "HEAD")
@authenticated
@requires("view")
@_named
def task_detail(request: HttpRequest, name: str) -> HttpResponse:
    """``GET <prefix>/<name>/``: one task's state (``never run`` for a
    registered task with no run yet), or 404."""
    state = task_reads.task_state(name)
    if state is None:
        return error(404, f"No task named {name!r} has run.")
    item = task_reads.task_json(state)
    return conditional_json(request, item, [item])


# --- the operations --------------------------------------------------------------------


@_operation
def task_run(request: HttpRequest, name: str) -> HttpResponse:
    """Start the registered task ``name`` in a thread of this process, under its
    lease, with the body's ``args`` and ``kwargs``; with ``BGTASKS_EXECUTOR =
    "worker"``, file a request for a worker."""
    options = post_options(request, RunForm)
    if isinstance(options, JsonResponse):
        return options
    try:
        result = writes.start(
            name,
            args=options["args"],
            kwargs=options["kwargs"],
            ttl=options["ttl"],
            requested_by=f"api: {request.user}",
        )
    except (ValueError, TypeError) as exc:  # arguments the task can't take; the ttl
        return error(400, str(exc))
    if isinstance(result, writes.NotRegistered):
        return error(404, f"No background task is registered as {name!r}.")
    if isinstance(result, writes.AlreadyHeld):
        held = result.state
        holder = held.owner if held is not None else "another owner"
        return error(
            409,
            f"Task {name!r} is already running on {holder}.",
            state=held.as_json() if held is not None else None,
        )
    if isinstance(result, writes.AlreadyRequested):
        pending = result.state
        return error(
            409,
            f"Task {name!r} already has a pending request.",
            state=pending.as_json() if pending is not None else None,
        )
    if isinstance(result, writes.Requested):  # BGTASKS_EXECUTOR = "worker"
        return _accepted(name, result.state.as_json())
    # The work may already have finished; the token says which run this was.
    state = BackgroundTask.objects.get_state(name)
    return _accepted(
        name,
        state.as_json() if state is not None else {"name": name, "token": result.running.token},
    )


@_operation
def task_cancel(request: HttpRequest, name: str) -> HttpResponse:
    """Ask the holder of ``name`` to stop; it sees this at its next heartbeat."""
    options = post_options(request, CancelForm)
    if isinstance(options, JsonResponse):
        return options
    # With a token, only that run is asked to stop: a client cancels the run
    # it showed, never a newer one that took over since.
    result = writes.request_cancel(name, token=options["token"])
    if isinstance(result, writes.NeverRun):
        return error(404, f"No task named {name!r} has run.")
    if isinstance(result, writes.CancelRequested):
        return _accepted(name, result.state.as_json())
    if isinstance(result, writes.TookOverSince):
        message = (
            f"Task {name!r} is no longer run by token {result.token} (now {result.state.token})."
        )
    else:
        message = f"Task {name!r} is not running."
    return error(409, message, state=result.state.as_json())


@_operation
def task_pause(request: HttpRequest, name: str) -> HttpResponse:
    """``POST <prefix>/<name>/pause/``: workers start nothing of ``name``
    until its unpause; a run going on finishes."""
    result = pausing.pause(name)
    if isinstance(result, writes.NotRegistered):
        return error(404, f"No background task is registered as {name!r}.")
    assert isinstance(result, pausing.TaskPaused)  # a name, not a queue
    return JsonResponse({**result.state.as_json(), "changed": result.changed})


@_operation
def task_unpause(request: HttpRequest, name: str) -> HttpResponse:
    """``POST <prefix>/<name>/unpause/``: workers start ``name`` again."""
    result = pausing.unpause(name)
    assert isinstance(result, pausing.TaskUnpaused)  # a name, not a queue
    if result.state is None:
        return error(404, f"No task named {name!r} has run.")
    return JsonResponse({**result.state.as_json(), "changed": result.changed})


# --- Django Tasks (LeaseBackend) -----------------------------------------------------------


@endpoint("GET", "HEAD")
@authenticated
@requires("view")
def queued_list(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/django-tasks/``: Django Tasks newest first, a page at a
    time, filtered by the query (:mod:`django_bgtasks.http.paging`):
    ``{"django_tasks": [...], "next": <the next page's URL, or null>}``."""
    query = list_query(request)
    if isinstance(query, HttpResponse):
        return query
    with read_database.reading() as source:
        page = queued.queued_page(query.filters, before=query.before, limit=query.limit)
        paused = queues.paused_queues()
        items = [queued.queued_json(row, paused) for row in page.rows]
    body = {
        "django_tasks": items,
        "next": next_url(request, page.next_before),
        "read_from": source.as_json(),
    }
    return conditional_json(request, body, items)


@endpoint("GET", "HEAD")
@authenticated
@requires("view")
def worker_list(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/workers/``: every worker as ``bgtasks workers --json``
    prints it (:mod:`django_bgtasks.operations.workers`): its last report,
    a silent one's runs with what became of each, and the Django Tasks it holds."""
    return read_list(request, "workers", lambda: [w.as_json() for w in worker_views.workers()])


@endpoint("GET", "HEAD")
@authenticated
@requires("view")
def queue_list(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/django-tasks/queues/``: every queue that has tasks or a
    pause (:mod:`django_bgtasks.operations.queues`): ``{"queues": [{"name",
    "paused", "paused_at", "counts": {"READY": n, ...}, "capped": [...]}]}``."""
    return read_list(request, "queues", lambda: [q.as_json() for q in queues.queues()])


def _task_json(row: Any) -> dict[str, Any]:
    """One Django Task's JSON, with what it waits for (the paused queues, read now)."""
    return queued.queued_json(row, queues.paused_queues())


def _result_id(view: View) -> View:
    """Pass the URL's Django Task id on as a canonical UUID string, or answer
    a JSON 404 for one that is no UUID: no task can have it. (urls.py routes
    any other segment here last, so that no malformed id meets Django's HTML
    404.)"""

    @wraps(view)
    def checked(request: HttpRequest, result_id: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            parsed = str(uuid.UUID(str(result_id)))
        except ValueError:
            return error(404, f"No Django Task has the id {result_id!r}: it is not a UUID.")
        return view(request, parsed, *args, **kwargs)

    return checked  # type: ignore[return-value]


@endpoint("GET", "HEAD")
@authenticated
@requires("view")
@_result_id
def queued_detail(request: HttpRequest, result_id: str) -> HttpResponse:
    """``GET <prefix>/django-tasks/<id>/``: one Django Task, or 404."""
    row = queued.queued_task(result_id)
    if row is None:
        return error(404, f"No Django Task has the id {result_id!r}.")
    item = _task_json(row)
    return conditional_json(request, item, [item])


# Every method: what is refused first is what any endpoint refuses first.
_ANY_METHOD = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@endpoint(*_ANY_METHOD)
@authenticated
@csrf_protect
@requires("view")
def no_endpoint(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any path under the API's prefix that no route takes: a JSON 404, like
    every other answer there. Refused as any endpoint first (403 to whoever
    may not read, and to a POST without its CSRF token), so that it tells a
    stranger nothing. Writes nothing."""
    return error(404, f"No endpoint of the bgtasks API at {request.path!r}.")


def _queued_operation(view: View) -> View:
    """A write to one Django Task: as :func:`_operation`, on a well-formed id."""
    return outside_request_transactions(
        endpoint("POST")(authenticated(csrf_protect(requires("change")(_result_id(view)))))
    )


def _queued_accepted(result_id: str, row: Any) -> HttpResponse:
    """202 with the Django Task as it is now, and where to poll it."""
    response = JsonResponse(_task_json(row), status=202)
    response.headers["Location"] = reverse("bgtasks:django-task", args=[result_id])
    return response


@_queued_operation
def queued_cancel(request: HttpRequest, result_id: str) -> HttpResponse:
    """``POST <prefix>/django-tasks/<id>/cancel/``: 202 (a ready task will not
    run; a running one stops at its next ``check()``), 404, or 409 when it
    already finished."""
    result = writes.cancel_queued(result_id)
    if isinstance(result, writes.QueuedUnknown):
        return error(404, f"No Django Task has the id {result_id!r}.")
    if isinstance(result, writes.QueuedFinished):
        return error(409, "The Django Task already finished.", task=_task_json(result.row))
    return _queued_accepted(result_id, result.row)


@_queued_operation
def queued_retry(request: HttpRequest, result_id: str) -> HttpResponse:
    """``POST <prefix>/django-tasks/<id>/retry/``: run a failed Django Task
    again, 202 (ready at once, with one more attempt if it had used them
    all); 404; or 409, with the task, when it is not failed, or when another
    run of its unique key is ready or running (``held_by``, that task's id)."""
    result = writes.retry_queued(result_id)
    if isinstance(result, writes.QueuedUnknown):
        return error(404, f"No Django Task has the id {result_id!r}.")
    if isinstance(result, writes.QueuedNotFailed):
        return error(
            409,
            f"The Django Task is {result.row.status}, not FAILED: only a failed task is retried.",
            task=_task_json(result.row),
        )
    if isinstance(result, writes.QueuedKeyHeld):
        holder = result.holder
        return error(
            409,
            f"Another run of unique key {result.row.unique_key!r} is ready or running.",
            task=_task_json(result.row),
            held_by=str(holder.uuid) if holder is not None else None,
        )
    return _queued_accepted(result_id, result.row)


def _queue_operation(view: View) -> View:
    """A write to a queue: as :func:`_operation`, its name in the body."""
    return outside_request_transactions(
        endpoint("POST")(authenticated(csrf_protect(requires("change")(view))))
    )


@_queue_operation
def queue_pause(request: HttpRequest) -> HttpResponse:
    """``POST <prefix>/django-tasks/queues/pause/``: no worker claims a task
    of the body's ``queue`` until its unpause; running ones finish."""
    return _queue_answer(request, pausing.pause)


@_queue_operation
def queue_unpause(request: HttpRequest) -> HttpResponse:
    """``POST <prefix>/django-tasks/queues/unpause/``: workers claim from the
    body's ``queue`` again."""
    return _queue_answer(request, pausing.unpause)


def _queue_answer(
    request: HttpRequest, operation: Callable[..., pausing.PauseResult | pausing.UnpauseResult]
) -> HttpResponse:
    """The pause or unpause ``operation`` of the body's ``queue``, as JSON:
    200 ``{"queue", "paused", "changed"}``; 404 for a queue no backend has;
    400 for a body without a well-formed ``queue``."""
    options = post_options(request, QueueForm)
    if isinstance(options, JsonResponse):
        return options
    try:
        result = operation(queue=options["queue"])
    except (ValueError, TypeError) as exc:
        return error(400, str(exc))
    if isinstance(result, pausing.UnknownQueue):
        return error(404, f"No LeaseBackend has the queue {result.queue!r}.", queues=result.queues)
    assert isinstance(result, pausing.QueuePaused | pausing.QueueUnpaused)
    paused = isinstance(result, pausing.QueuePaused)
    return JsonResponse({"queue": result.queue, "paused": paused, "changed": result.changed})
