"""Server-Sent Events: the tasks' states pushed to browsers, for ASGI servers.

* ``GET <prefix>/events/``: every task (the registered ones that never ran too);
* ``GET <prefix>/<name>/events/``: one task, or 404;
* ``GET <prefix>/watch/<signed>/`` and ``…/watch/<signed>/events/``: one task's
  state as JSON, and its stream, for whoever holds a signed watch URL
  (:func:`watch_url`), without a session: a public status page.

Each event is ``event: state`` with the task's whole ``TaskState`` JSON (as
``GET <prefix>/<name>/`` has it), or ``event: removed`` with ``{"name": ...}``
when a row is deleted, and with each keepalive ``event: heartbeats``, each
watched task's heartbeat age (heartbeats are no change). A stream opens
with every watched task's state, then sends each change as
:mod:`django_bgtasks.push.feed` reports it, a run's progress at most once
per ``BGTASKS_PROGRESS_INTERVAL`` (its start, end, cancel request or loss at
once), and a comment every ``BGTASKS_EVENTS_KEEPALIVE`` seconds (15) so that
proxies keep it open.

An event's ``id`` is a digest of every watched task's state as the client
then has it, the same on every replica. A browser that reconnects sends it
as ``Last-Event-ID``: when nothing changed since, the stream goes on without
repeating anything; otherwise it starts with every watched task's current
state, so the client misses nothing whichever replica it reaches.

Access is the JSON API's rule (:func:`~django_bgtasks.http.access.access_refusal`),
checked when a stream opens: a 403 JSON error and no data for anyone else.
It is checked again at each keepalive, and a stream whose access ended ends
(:mod:`django_bgtasks.http.stream_access`). The stream is read only and a
GET, so it needs no CSRF token. How a process serves many streams at once
is :mod:`django_bgtasks.http.stream`.

Under WSGI a stream would hold a worker for as long as it is open: the
endpoints answer 501 there, pointing at the polling API. A page that would
open one asks :func:`stream_offered` first, so that it polls instead of
asking for a 501 (which the browser logs as an error).
"""

from __future__ import annotations

import math
import time

from asgiref.sync import sync_to_async
from django.core import signing
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.urls import reverse

from django_bgtasks.conf import conf
from django_bgtasks.http.access import access_refusal
from django_bgtasks.http.responses import (
    conditional_json,
    endpoint,
    error,
    outside_request_transactions,
)
from django_bgtasks.http.stream import in_read_slot, stream_response
from django_bgtasks.http.stream_access import Access, session_access
from django_bgtasks.operations import task_reads
from django_bgtasks.validation import validate_name

WATCH_SALT = "django_bgtasks.events.watch"
MAX_WATCH_SECONDS = 3650 * 86400  # ten years


# --- signed watch URLs --------------------------------------------------------------------


def watch_url(name: str, *, expires: float = 3600) -> str:
    """The path of a read-only watch URL for task ``name``, valid for
    ``expires`` seconds: ``…/watch/<signed>/`` (its state as JSON) and that
    plus ``events/`` (its stream). Anyone who has it sees that task's state,
    and nothing else, until it expires. The expiry is the app servers' clock's."""
    name = validate_name(name)
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        raise TypeError(f"expires must be a number of seconds, not {type(expires).__name__}")
    if not math.isfinite(expires) or not 0 < expires <= MAX_WATCH_SECONDS:
        raise ValueError(f"expires must be from 0 to {MAX_WATCH_SECONDS} seconds, not {expires!r}")
    signed = signing.dumps({"task": name, "until": time.time() + expires}, salt=WATCH_SALT)
    return reverse("bgtasks:watch", args=[signed])


def _watched(signed: str) -> tuple[str, float] | HttpResponse:
    """The task and expiry a watch URL was signed for, or its 403/404 JSON."""
    try:
        payload = signing.loads(signed, salt=WATCH_SALT)
    except signing.BadSignature:
        return error(403, "This watch link is not valid.")
    name, until = payload.get("task"), payload.get("until")
    if not isinstance(name, str) or not isinstance(until, int | float):
        return error(403, "This watch link is not valid.")
    if time.time() >= until:
        return error(403, "This watch link has expired.")
    return name, float(until)


def stream_offered(request: HttpRequest) -> bool:
    """Whether a page served by ``request`` should open the event stream:
    as ``BGTASKS_ADMIN_EVENTS`` says when it is set (``True`` where the
    ``events/`` URLs are routed to an ASGI server and the pages are not),
    else when this very request came through ASGI, where the stream is
    served too."""
    setting = conf.ADMIN_EVENTS
    if setting is not None:
        return bool(setting)
    return isinstance(request, ASGIRequest)


def _needs_asgi(request: HttpRequest, poll: str) -> HttpResponse | None:
    if isinstance(request, ASGIRequest):
        return None
    return error(
        501,
        "The event stream needs an ASGI server (uvicorn, daphne); this one serves WSGI. "
        "Poll the JSON API instead.",
        poll=poll,
    )


async def _open(request: HttpRequest, names: frozenset[str] | None) -> HttpResponseBase:
    refused = await sync_to_async(in_read_slot(access_refusal))(request, "view")
    if refused is not None:
        return refused
    # Only those who may watch learn what this server can serve.
    needs_asgi = _needs_asgi(request, reverse("bgtasks:list"))
    if needs_asgi is not None:
        return needs_asgi
    return stream_response(names, session_access(request).allowed, request)


# --- the views -----------------------------------------------------------------------------


@outside_request_transactions
@endpoint("GET", "HEAD")
async def events(request: HttpRequest) -> HttpResponseBase:
    """``GET <prefix>/events/``: every task's state, then each change."""
    return await _open(request, None)


@outside_request_transactions
@endpoint("GET", "HEAD")
async def task_events(request: HttpRequest, name: str) -> HttpResponseBase:
    """``GET <prefix>/<name>/events/``: one task's state, then each change; 404 if unknown."""
    try:
        name = validate_name(name)
    except ValueError as exc:
        return error(400, str(exc))
    refused = await sync_to_async(in_read_slot(access_refusal))(request, "view")
    if refused is not None:
        return refused
    needs_asgi = _needs_asgi(request, reverse("bgtasks:task", args=[name]))
    if needs_asgi is not None:
        return needs_asgi
    if await sync_to_async(in_read_slot(task_reads.task_state))(name) is None:
        return error(404, f"No task named {name!r} has run.")
    return stream_response(frozenset([name]), session_access(request).allowed, request)


@outside_request_transactions
@endpoint("GET", "HEAD")
def watch(request: HttpRequest, signed: str) -> HttpResponse:
    """``GET <prefix>/watch/<signed>/``: the signed task's state as JSON (read only)."""
    found = _watched(signed)
    if isinstance(found, HttpResponse):
        return found
    state = task_reads.task_state(found[0])
    if state is None:
        return error(404, f"No task named {found[0]!r} has run.")
    item = task_reads.task_json(state)
    return conditional_json(request, item, [item])


@outside_request_transactions
@endpoint("GET", "HEAD")
async def watch_events(request: HttpRequest, signed: str) -> HttpResponseBase:
    """``GET <prefix>/watch/<signed>/events/``: the signed task's stream (read only)."""
    found = _watched(signed)
    if isinstance(found, HttpResponse):
        return found
    name, until = found
    refused = _needs_asgi(request, reverse("bgtasks:watch", args=[signed]))
    if refused is not None:
        return refused
    if await sync_to_async(in_read_slot(task_reads.task_state))(name) is None:
        return error(404, f"No task named {name!r} has run.")
    return stream_response(
        frozenset([name]), Access(lambda: time.time() < until, local=True).allowed, request
    )
