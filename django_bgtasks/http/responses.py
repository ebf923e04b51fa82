"""What every HTTP surface answers alike: the JSON API, the event stream and
the admin's live views.

* :func:`endpoint`: every answer of a view JSON: a wrong method is a 405 with
  ``Allow``, and a ``DatabaseError`` a 503 with ``Retry-After``, logged on
  ``django_bgtasks.api``; :func:`error` is the body of every refusal;
* :func:`outside_request_transactions`: a view that writes leases is exempt
  from ``ATOMIC_REQUESTS``;
* :func:`conditional_json` and :func:`task_list_response`: reads with a weak
  ``ETag``, answering ``If-None-Match`` with 304.

The tag lets many polling tabs cost a small query each and no body. It covers
everything in the representation except ``heartbeat_age``, which grows with
the clock: a client that gets a 304 adds the seconds since its last 200 to the
age it has. A holder going silent still changes the tag, because the task
then reads as stale instead of running.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.db import DatabaseError, connections, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers
from django.views.decorators.csrf import csrf_exempt

from django_bgtasks.db import read_database
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import task_reads

AnyView = TypeVar("AnyView", bound=Callable[..., Any])  # a sync or an async view

logger = logging.getLogger("django_bgtasks.api")
# Seconds a client is asked to wait after a 503 (a database restart takes a few).
RETRY_AFTER = 5


def outside_request_transactions(view: AnyView) -> AnyView:
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


def endpoint(*methods: str) -> Callable[[AnyView], AnyView]:
    """Make every answer of an API view (sync or async) JSON, whatever happens
    before or inside it: another method than ``methods`` is a 405 with an
    ``Allow`` header (Django's ``require_http_methods`` answers it with an
    empty body), and a ``DatabaseError`` (the server restarting or
    unreachable, in the view or in the session and permission reads before
    it) is a 503 with ``Retry-After``, logged on ``django_bgtasks.api``,
    instead of Django's HTML 500. Outermost but for
    :func:`outside_request_transactions`, so it covers the others.

    Exempt from the site's ``CsrfViewMiddleware``, whose refusal is an HTML
    page: a read allows only safe methods, which it never checks, and a
    write checks the token itself
    (:func:`django_bgtasks.http.access.csrf_protect`, a JSON 403)."""
    allowed = frozenset(methods)

    def decorator(view: AnyView) -> AnyView:
        if iscoroutinefunction(view):

            @wraps(view)
            async def checked_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                if request.method not in allowed:
                    return _not_allowed(request, methods)
                try:
                    return await view(request, *args, **kwargs)
                except DatabaseError as exc:
                    return _unavailable(request, exc)

            return csrf_exempt(checked_async)  # type: ignore[return-value]

        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if request.method not in allowed:
                return _not_allowed(request, methods)
            try:
                return view(request, *args, **kwargs)
            except DatabaseError as exc:
                return _unavailable(request, exc)

        return csrf_exempt(checked)  # type: ignore[return-value]

    return decorator


def _not_allowed(request: HttpRequest, methods: tuple[str, ...]) -> JsonResponse:
    response = error(
        405, f"Method {request.method} is not allowed here; use {' or '.join(methods)}."
    )
    response.headers["Allow"] = ", ".join(methods)
    return response


def _unavailable(request: HttpRequest, exc: DatabaseError) -> JsonResponse:
    # The details go to the log only: the answer may reach someone not yet
    # authenticated (the session could not be read either).
    logger.error(
        "%s %s: the database is unavailable: %s", request.method, request.path, exc, exc_info=exc
    )
    response = error(503, f"The database is unavailable; try again in {RETRY_AFTER} seconds.")
    response.headers["Retry-After"] = str(RETRY_AFTER)
    return response


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


def task_list_response(request: HttpRequest, *, never_run: bool = False) -> HttpResponse:
    """Every task's state; shared with the admin's live view. With
    ``never_run``, the registered tasks that never ran too, and each
    registered task's schedule and description (``task_reads.task_states``).
    Read from the read database (:func:`read_list`)."""
    if never_run:
        return read_list(
            request, "tasks", lambda: [task_reads.task_json(s) for s in task_reads.task_states()]
        )
    return read_list(
        request, "tasks", lambda: [s.as_json() for s in BackgroundTask.objects.list_states()]
    )


def read_list(
    request: HttpRequest, key: str, read: Callable[[], list[dict[str, Any]]]
) -> HttpResponse:
    """``{key: read(), "read_from": ...}``: a list's items, read from the read
    database, which ``"read_from"`` names (db/read_database.py); the ETag is
    the items' (:func:`conditional_json`)."""
    with read_database.reading() as source:
        items = read()
    return conditional_json(request, {key: items, "read_from": source.as_json()}, items)
