"""The JSON status API, for front ends to poll: ``include("django_bgtasks.urls")``.

* ``GET <prefix>/``: ``{"tasks": [TaskState, ...]}``, every task by name;
* ``GET <prefix>/<name>/``: one ``TaskState``, or 404;
* ``POST <prefix>/<name>/run/``: start a registered task here, 202 (409 when
  it is held, 404 when no task is registered by that name, 400 on bad input);
* ``POST <prefix>/<name>/cancel/``: ask the holder to stop, 202 (409 when
  nobody holds it, or when an optional ``token`` no longer does; 404 when the
  task has never run; 400 on bad input).

A ``TaskState`` is :meth:`TaskState.as_json`, the shape the ``bgtasks``
command prints too. Everything is read from the lease table through
``BackgroundTask.objects`` (with the database's clock), so every replica
answers alike; nothing here keeps state of its own.

Reads need a staff session with the model's view (or change) permission and
writes its change permission; anyone else gets a 403 JSON error and no data.
Writes are CSRF-protected like any session-authenticated POST.

Reads carry a weak ``ETag`` and answer ``If-None-Match`` with 304, so that
many polling tabs cost a small query each and no body. The tag covers
everything in the representation except ``heartbeat_age``, which grows with
the clock: a client that gets a 304 adds the seconds since its last 200 to the
age it has. A holder going silent still changes the tag, because the task
then reads as stale instead of running.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any, TypeVar

from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.urls import reverse
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST, require_safe

from .exceptions import UnknownTask
from .models import BackgroundTask
from .permissions import Action, user_may
from .tasks import get_task
from .validation import validate_name

View = TypeVar("View", bound=Callable[..., HttpResponseBase])


def outside_request_transactions(view: View) -> View:
    """Exempt a view that writes leases from ``ATOMIC_REQUESTS``.

    A lease write must be durable when it returns, so it refuses to run
    inside ``transaction.atomic()``. The exemption covers every database
    alias, because which one holds the leases (``BGTASKS_DATABASE``) is read
    per request while this runs once, when the URLconf is loaded.
    """
    for alias in connections:
        view = transaction.non_atomic_requests(using=alias)(view)
    return view


def error(status: int, message: str, **extra: Any) -> JsonResponse:
    """A JSON error body: ``{"error": message, ...}``, never task data."""
    return JsonResponse({"error": message, **extra}, status=status)


def _requires(action: Action) -> Callable[[View], View]:
    def decorator(view: View) -> View:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not user_may(request, action):
                user = getattr(request, "user", None)
                if user is None or not user.is_authenticated:
                    return error(403, "Log in as a staff member to see background tasks.")
                return error(403, f"You do not have permission to {action} background tasks.")
            return view(request, *args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorator


def etag(items: Iterable[dict[str, Any]]) -> str:
    """A weak ETag over ``TaskState.as_json()`` dicts, leaving out the one
    field that changes without the task changing (``heartbeat_age``)."""
    digest = hashlib.blake2b(digest_size=16)
    for item in items:
        tagged = {key: value for key, value in item.items() if key != "heartbeat_age"}
        # Compact JSON never contains a raw newline, so one separates items.
        digest.update(json.dumps(tagged, sort_keys=True, separators=(",", ":")).encode())
        digest.update(b"\n")
    return f'W/"{digest.hexdigest()}"'


def conditional_json(
    request: HttpRequest, payload: Any, items: list[dict[str, Any]]
) -> HttpResponse:
    """``payload`` as JSON, or 304 when the client's ETag still matches."""
    tag = etag(items)
    response = get_conditional_response(request, etag=tag)
    if response is None:
        response = JsonResponse(payload, safe=False)
    if response.status_code in (200, 304):
        response.headers["ETag"] = tag
        # Private: it is per-user data. no-cache: revalidate on every poll.
        patch_cache_control(response, private=True, no_cache=True)
        patch_vary_headers(response, ["Cookie"])
    return response


def task_list_response(request: HttpRequest) -> HttpResponse:
    """Every task's state; shared with the admin's live view."""
    items = [state.as_json() for state in BackgroundTask.objects.list_states()]
    return conditional_json(request, {"tasks": items}, items)


def _clean_name(name: str) -> str | JsonResponse:
    try:
        return validate_name(name)
    except ValueError as exc:
        return error(400, str(exc))


def _state_url(name: str) -> str:
    return reverse("bgtasks:task", args=[name])


@require_safe
@_requires("view")
def task_list(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/``: every task's state."""
    return task_list_response(request)


@require_safe
@_requires("view")
def task_detail(request: HttpRequest, name: str) -> HttpResponse:
    """``GET <prefix>/<name>/``: one task's state, or 404."""
    name_or_error = _clean_name(name)
    if isinstance(name_or_error, JsonResponse):
        return name_or_error
    state = BackgroundTask.objects.get_state(name_or_error)
    if state is None:
        return error(404, f"No task named {name_or_error!r} has run.")
    item = state.as_json()
    return conditional_json(request, item, [item])


class _BadInput(ValueError):
    pass


# The optional fields each POST accepts, and how a form's text becomes one.
_FORM_FIELDS = {"ttl": (float, "a number of seconds"), "token": (int, "a whole number")}


def _post_options(request: HttpRequest, accepted: tuple[str, ...]) -> dict[str, Any]:
    """The optional fields of a POST (``accepted``), from a JSON object or a form."""
    data: Any
    if request.content_type == "application/json":
        try:
            data = json.loads(request.body or b"{}")
        except ValueError as exc:
            raise _BadInput(f"The body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _BadInput("The body must be a JSON object.")
    else:
        data = {key: request.POST[key] for key in request.POST if key != "csrfmiddlewaretoken"}
        for key, (convert, kind) in _FORM_FIELDS.items():
            if key in data:
                try:
                    data[key] = convert(data[key])
                except ValueError:
                    raise _BadInput(f"{key} must be {kind}, not {data[key]!r}") from None
    unknown = sorted(set(data) - set(accepted))
    if unknown:
        only = " and ".join(repr(field) for field in accepted)
        raise _BadInput(f"Unknown field(s): {', '.join(unknown)}. Only {only} is accepted.")
    options: dict[str, Any] = data
    return options


@outside_request_transactions
@csrf_protect
@require_POST
@_requires("change")
def task_run(request: HttpRequest, name: str) -> HttpResponse:
    """Start the registered task ``name`` in a thread of this process, under its lease."""
    name_or_error = _clean_name(name)
    if isinstance(name_or_error, JsonResponse):
        return name_or_error
    name = name_or_error
    try:
        options = _post_options(request, ("ttl",))
        task = get_task(name)
        if "ttl" in options:
            task = task.options(ttl=options["ttl"])
    except UnknownTask:
        return error(404, f"No background task is registered as {name!r}.")
    except (ValueError, TypeError) as exc:
        return error(400, str(exc))
    running = task.start()
    state = BackgroundTask.objects.get_state(name)
    if running is None:
        holder = state.owner if state is not None else "another owner"
        return error(
            409,
            f"Task {name!r} is already running on {holder}.",
            state=state.as_json() if state is not None else None,
        )
    # The work may already have finished; the token says which run this was.
    response = JsonResponse(
        state.as_json() if state is not None else {"name": name, "token": running.token},
        status=202,
    )
    response.headers["Location"] = _state_url(name)
    return response


@outside_request_transactions
@csrf_protect
@require_POST
@_requires("change")
def task_cancel(request: HttpRequest, name: str) -> HttpResponse:
    """Ask the holder of ``name`` to stop; it sees this at its next heartbeat."""
    name_or_error = _clean_name(name)
    if isinstance(name_or_error, JsonResponse):
        return name_or_error
    name = name_or_error
    try:
        # With a token, only that run is asked to stop: a client cancels the
        # run it showed, never a newer one that took over since.
        token = _post_options(request, ("token",)).get("token")
        requested = BackgroundTask.objects.request_cancel(name, token=token)
    except (ValueError, TypeError) as exc:
        return error(400, str(exc))
    state = BackgroundTask.objects.get_state(name)
    if state is None:
        return error(404, f"No task named {name!r} has run.")
    if not requested:
        if token is not None and state.token != token:
            message = f"Task {name!r} is no longer run by token {token} (now {state.token})."
        else:
            message = f"Task {name!r} is not running."
        return error(409, message, state=state.as_json())
    response = JsonResponse(state.as_json(), status=202)
    response.headers["Location"] = _state_url(name)
    return response
