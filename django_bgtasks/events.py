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
:mod:`django_bgtasks.changes` reports it, a run's progress at most once
per ``BGTASKS_PROGRESS_INTERVAL`` (its start, end, cancel request or loss at
once), and a comment every ``BGTASKS_EVENTS_KEEPALIVE`` seconds (15) so that
proxies keep it open.

An event's ``id`` is a digest of every watched task's state as the client
then has it, the same on every replica. A browser that reconnects sends it
as ``Last-Event-ID``: when nothing changed since, the stream goes on without
repeating anything; otherwise it starts with every watched task's current
state, so the client misses nothing whichever replica it reaches.

Access is the JSON API's rule (:func:`views.access_refusal`), checked when a
stream opens: a 403 JSON error and no data for anyone else. It is checked
again at each keepalive: a session that ended (logout, a new password), a
user who lost the permission, or an expired watch URL ends the stream with
``event: end``. The stream is read only and a GET, so it needs no CSRF token.

Under WSGI a stream would hold a worker for as long as it is open: the
endpoints answer 501 there, pointing at the polling API.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import time
from collections.abc import AsyncIterator, Callable
from importlib import import_module
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AnonymousUser
from django.core import signing
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import reverse
from django.views.decorators.http import require_safe

from . import authentication, changes, operations
from .conf import conf
from .permissions import allowed, user_may
from .validation import progress_interval, validate_name
from .views import access_refusal, conditional_json, error, etag, outside_request_transactions

_T = TypeVar("_T")
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


# --- the stream ----------------------------------------------------------------------------


def _digest(sent: dict[str, dict[str, Any]]) -> str:
    return etag(sent[name] for name in sorted(sent))[3:-1]


def _event(kind: str, data: dict[str, Any], event_id: str) -> str:
    # Compact JSON has no raw newline, so one data line carries it.
    body = json.dumps(data, separators=(",", ":"))
    return f"id: {event_id}\nevent: {kind}\ndata: {body}\n\n"


def _same(new: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """Whether ``new`` shows nothing ``old`` did not (heartbeat times aside,
    as the change feed judges; a feed's first read repeats what a stream's
    opening read sent)."""
    if old is None:
        return False
    skip = ("heartbeat_age", "updated_at")
    return all(new.get(key) == old.get(key) for key in new.keys() | old.keys() if key not in skip)


def _progress_only(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Whether ``new`` is the same run as ``old``, still running, with new progress."""
    if old is None or new is None:
        return False
    same = ("token", "status", "cancel_requested", "running")
    return bool(new["running"]) and all(old.get(key) == new.get(key) for key in same)


def _closing(work: Callable[..., _T]) -> Callable[..., _T]:
    """``work``, then close the calling thread's database connections.

    Under ASGI each request's sync code runs in a thread of its own, with a
    connection of its own, kept until the request ends: for a stream, for
    hours. A stream reads only now and then (at open, at each keepalive), so
    it gives its connection back after each read instead, and a thousand
    open streams hold no connection between reads.
    """

    @functools.wraps(work)
    def closing(*args: Any) -> _T:
        try:
            return work(*args)
        finally:
            for connection in connections.all(initialized_only=True):
                if not connection.in_atomic_block:
                    connection.close()

    return closing


def _snapshot(names: frozenset[str] | None) -> dict[str, dict[str, Any]]:
    if names is None:
        states = operations.task_states()
    else:
        states = [s for s in map(operations.task_state, sorted(names)) if s is not None]
    return {state.name: operations.task_json(state) for state in states}


async def _stream(
    names: frozenset[str] | None, still_allowed: Callable[[], bool], last_id: str | None
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    # Watching before the first read: a change in between is not lost.
    def wake() -> None:
        loop.call_soon_threadsafe(woken.set)

    # Watching before the first read: a change in between is not lost.
    watcher = changes.watch(names, wake=wake)
    try:
        interval = progress_interval()
        keepalive = float(conf.EVENTS_KEEPALIVE)
        current = await sync_to_async(_closing(_snapshot))(names)
        yield "retry: 2000\n\n"
        sent: dict[str, dict[str, Any]] = {}
        if last_id is not None and last_id == _digest(current):
            sent = dict(current)  # the client has all of it
        else:
            for name, each in current.items():
                sent[name] = each
                yield _event("state", each, _digest(sent))
        pending: dict[str, dict[str, Any] | None] = {}
        last_at: dict[str, float] = {}
        next_keepalive = time.monotonic() + keepalive
        while True:
            now = time.monotonic()
            due = [last_at.get(name, 0.0) + interval for name in pending]
            timeout = max(0.0, min([next_keepalive, *due]) - now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout)
            woken.clear()
            for change in watcher.take():
                state = change.state
                pending[change.name] = None if state is None else operations.task_json(state)
            now = time.monotonic()
            for name, item in list(pending.items()):
                if _progress_only(sent.get(name), item) and now - last_at.get(name, 0) < interval:
                    continue  # progress, again too soon: the newest goes out when it's due
                del pending[name]
                last_at[name] = now
                if item is None:
                    if sent.pop(name, None) is not None:
                        yield _event("removed", {"name": name}, _digest(sent))
                elif not _same(item, sent.get(name)):
                    sent[name] = item
                    yield _event("state", item, _digest(sent))
            if now >= next_keepalive:
                if not await sync_to_async(_closing(still_allowed))():
                    yield 'event: end\ndata: {"error": "The stream\'s access ended."}\n\n'
                    return
                yield ": keepalive\n\n"
                # Heartbeats are no change: their ages come with the keepalive,
                # from the feed's latest read, for a page that shows them.
                ages = watcher.feed.heartbeat_ages(sent.keys())
                if ages:
                    body = json.dumps(ages, separators=(",", ":"))
                    yield f"event: heartbeats\ndata: {body}\n\n"
                next_keepalive = now + keepalive
    finally:
        watcher.close()


def _response(
    names: frozenset[str] | None, still_allowed: Callable[[], bool], request: HttpRequest
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        _stream(names, still_allowed, request.headers.get("Last-Event-ID")),
        content_type="text/event-stream",
    )
    response.headers["Cache-Control"] = "private, no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def _needs_asgi(request: HttpRequest, poll: str) -> HttpResponse | None:
    if isinstance(request, ASGIRequest):
        return None
    return error(
        501,
        "The event stream needs an ASGI server (uvicorn, daphne); this one serves WSGI. "
        "Poll the JSON API instead.",
        poll=poll,
    )


def _session_still_allowed(request: HttpRequest) -> Callable[[], bool]:
    """Whether the stream's user may still see tasks, read afresh: their
    session (or ``Authorization`` hook) and their permissions."""
    by_hook = getattr(request, "_bgtasks_by_hook", False)
    session_key = getattr(getattr(request, "session", None), "session_key", None)

    def check() -> bool:
        if by_hook:
            request.user = AnonymousUser()
            authentication.authenticate(request)
            return user_may(request, "view")
        if session_key is None:
            return False
        probe = HttpRequest()
        probe.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        return allowed(get_user(probe), "view")

    return check


async def _open(request: HttpRequest, names: frozenset[str] | None) -> HttpResponseBase:
    refused = await sync_to_async(_closing(access_refusal))(request, "view")
    if refused is not None:
        return refused
    # Only those who may watch learn what this server can serve.
    needs_asgi = _needs_asgi(request, reverse("bgtasks:list"))
    if needs_asgi is not None:
        return needs_asgi
    return _response(names, _session_still_allowed(request), request)


# --- the views -----------------------------------------------------------------------------


@outside_request_transactions
@require_safe
async def events(request: HttpRequest) -> HttpResponseBase:
    """``GET <prefix>/events/``: every task's state, then each change."""
    return await _open(request, None)


@outside_request_transactions
@require_safe
async def task_events(request: HttpRequest, name: str) -> HttpResponseBase:
    """``GET <prefix>/<name>/events/``: one task's state, then each change; 404 if unknown."""
    try:
        name = validate_name(name)
    except ValueError as exc:
        return error(400, str(exc))
    refused = await sync_to_async(_closing(access_refusal))(request, "view")
    if refused is not None:
        return refused
    needs_asgi = _needs_asgi(request, reverse("bgtasks:task", args=[name]))
    if needs_asgi is not None:
        return needs_asgi
    if await sync_to_async(_closing(operations.task_state))(name) is None:
        return error(404, f"No task named {name!r} has run.")
    return _response(frozenset([name]), _session_still_allowed(request), request)


@outside_request_transactions
@require_safe
def watch(request: HttpRequest, signed: str) -> HttpResponse:
    """``GET <prefix>/watch/<signed>/``: the signed task's state as JSON (read only)."""
    found = _watched(signed)
    if isinstance(found, HttpResponse):
        return found
    state = operations.task_state(found[0])
    if state is None:
        return error(404, f"No task named {found[0]!r} has run.")
    item = operations.task_json(state)
    return conditional_json(request, item, [item])


@outside_request_transactions
@require_safe
async def watch_events(request: HttpRequest, signed: str) -> HttpResponseBase:
    """``GET <prefix>/watch/<signed>/events/``: the signed task's stream (read only)."""
    found = _watched(signed)
    if isinstance(found, HttpResponse):
        return found
    name, until = found
    refused = _needs_asgi(request, reverse("bgtasks:watch", args=[signed]))
    if refused is not None:
        return refused
    if await sync_to_async(_closing(operations.task_state))(name) is None:
        return error(404, f"No task named {name!r} has run.")
    return _response(frozenset([name]), lambda: time.time() < until, request)
