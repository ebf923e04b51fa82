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

Access is the JSON API's rule
(:func:`~django_bgtasks.http.access.access_refusal`), checked when a stream
opens: a 403 JSON error and no data for anyone else. It is checked
again at each keepalive: a session that ended (logout, a new password), a
user who lost the permission, or an expired watch URL ends the stream with
``event: end``. That check is shared: a process checks each session (or
``Authorization`` header) at most once per keepalive interval, whatever the
number of its streams, so an operator's ten tabs cost one check, and a
stream learns of a logout within two keepalives. The stream is read only
and a GET, so it needs no CSRF token.

What scales with the number of streams is kept off the database and out of
the per-stream path: a process's streams on one event loop share one
:class:`~django_bgtasks.push.feed.Watcher` (woken once per change, not once per
stream); each change is rendered once (its JSON, its event text, its digest)
for every stream that sends it; and the reads a stream makes (its access
check, its opening states) run at most ``READ_SLOTS`` at a time per process,
so a thousand streams opening at once queue for a moment instead of opening
a thousand database connections.

Under WSGI a stream would hold a worker for as long as it is open: the
endpoints answer 501 there, pointing at the polling API.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
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

from django_bgtasks import authentication
from django_bgtasks.conf import conf
from django_bgtasks.core.states import TaskState
from django_bgtasks.http.access import access_refusal
from django_bgtasks.http.responses import (
    conditional_json,
    endpoint,
    error,
    outside_request_transactions,
)
from django_bgtasks.operations import writes as operations
from django_bgtasks.operations.permissions import allowed, user_may
from django_bgtasks.push import feed as changes
from django_bgtasks.validation import progress_interval, validate_name

_T = TypeVar("_T")
WATCH_SALT = "django_bgtasks.events.watch"
MAX_WATCH_SECONDS = 3650 * 86400  # ten years
# How many of a process's streams may read the database at once (an access
# check, an opening read): each read holds a connection for a moment.
READ_SLOTS = 8
_read_slots = threading.BoundedSemaphore(READ_SLOTS)


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


@dataclass(frozen=True)  # cached_property writes past frozen's __setattr__
class _Item:
    """One task's state as the streams send it, rendered once for all of them."""

    name: str
    data: dict[str, Any]  # operations.task_json(); shared, never changed
    body: str  # the data as compact JSON, which never holds a raw newline
    tag: bytes  # a digest of the data, heartbeat times aside
    run: tuple[Any, ...]  # what tells one run's progress from another run

    @classmethod
    def of(cls, state: TaskState) -> _Item:
        data = operations.task_json(state)
        body = json.dumps(data, separators=(",", ":"))
        kept = {key: value for key, value in data.items() if key not in changes.HEARTBEAT_FIELDS}
        tagged = json.dumps(kept, sort_keys=True, separators=(",", ":"))
        tag = hashlib.blake2b(tagged.encode(), digest_size=16).digest()
        run = tuple(data.get(key) for key in ("token", "status", "cancel_requested", "running"))
        return cls(state.name, data, body, tag, run)

    @functools.cached_property
    def alone(self) -> str:
        """The event of a stream that watches this task alone (the same for
        every such stream, so rendered once)."""
        return _event("state", self.body, _digest({self.name: self}))


def _digest(sent: dict[str, _Item]) -> str:
    """The stream's event id: a digest of what the client has, the same on
    every replica for the same states."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(sent):
        digest.update(sent[name].tag)
    return digest.hexdigest()


def _event(kind: str, body: str, event_id: str) -> str:
    return f"id: {event_id}\nevent: {kind}\ndata: {body}\n\n"


def _state_event(sent: dict[str, _Item], item: _Item) -> str:
    if len(sent) == 1:
        return item.alone
    return _event("state", item.body, _digest(sent))


def _same(new: _Item, old: _Item | None) -> bool:
    """Whether ``new`` shows nothing ``old`` did not (a feed's first read
    repeats what a stream's opening read sent)."""
    return old is not None and new.tag == old.tag


def _progress_only(old: _Item | None, new: _Item | None) -> bool:
    """Whether ``new`` is the same run as ``old``, still running, with new progress."""
    return old is not None and new is not None and bool(new.data["running"]) and old.run == new.run


def _closing(work: Callable[..., _T]) -> Callable[..., _T]:
    """``work``, in one of the process's ``READ_SLOTS``, then close the
    calling thread's database connections.

    Under ASGI each request's sync code runs in a thread of its own, with a
    connection of its own, kept until the request ends: for a stream, for
    hours. A stream reads only now and then (at open, at each keepalive), so
    it gives its connection back after each read instead, and a thousand
    open streams hold no connection between reads; the slots keep a
    thousand streams opening at once from asking for a thousand at once.
    """

    @functools.wraps(work)
    def closing(*args: Any) -> _T:
        with _read_slots:
            try:
                return work(*args)
            finally:
                for connection in connections.all(initialized_only=True):
                    if not connection.in_atomic_block:
                        connection.close()

    return closing


def _snapshot(names: frozenset[str] | None) -> dict[str, _Item]:
    if names is None:
        states = operations.task_states()
    else:
        states = [s for s in map(operations.task_state, sorted(names)) if s is not None]
    return {state.name: _Item.of(state) for state in states}


@dataclass(eq=False)
class _Subscriber:
    """One stream's share of its event loop's :class:`_Hub`."""

    names: frozenset[str] | None
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    # Each task's newest state not yet taken: a stream whose client reads
    # slowly holds one per task, however many changes it missed.
    changes: dict[str, _Item | None] = field(default_factory=dict)
    # When the hub's ticker wakes it for its keepalive (time.monotonic()).
    keepalive_at: float = math.inf

    def wants(self, name: str) -> bool:
        return self.names is None or name in self.names


class _Hub:
    """The streams of one event loop, fed by one watcher of the change feed.

    The feed's thread wakes the loop once per batch of changes (not once
    per stream); on the loop, each change is rendered once and handed to
    every stream that watches its task. One ticker wakes the streams whose
    keepalive is due, so that a stream waiting for a change arms no timer
    of its own each time it is woken (a thousand of those, per change, cost
    more than the change).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.subscribers: set[_Subscriber] = set()
        self.watcher: changes.Watcher | None = None
        self._lock = threading.Lock()
        self._scheduled = False
        self._ticker: asyncio.Task[None] | None = None

    def subscribe(self, names: frozenset[str] | None) -> _Subscriber:
        subscriber = _Subscriber(names)
        self.subscribers.add(subscriber)
        if self.watcher is None:
            self.watcher = changes.watch(None, wake=self._wake)
        if self._ticker is None or self._ticker.done():
            self._ticker = self.loop.create_task(self._tick())
        return subscriber

    async def _tick(self) -> None:
        # Keepalives a fraction of their interval late at most; the ticker
        # ends with the last stream.
        pace = min(1.0, float(conf.EVENTS_KEEPALIVE) / 4)
        while self.subscribers:
            now = time.monotonic()
            for subscriber in self.subscribers:
                if subscriber.keepalive_at <= now:
                    subscriber.woken.set()
            await asyncio.sleep(pace)

    def unsubscribe(self, subscriber: _Subscriber) -> None:
        self.subscribers.discard(subscriber)
        if not self.subscribers and self.watcher is not None:
            self.watcher.close()
            self.watcher = None

    def heartbeat_ages(self, names: Iterable[str]) -> dict[str, float | None]:
        return {} if self.watcher is None else self.watcher.feed.heartbeat_ages(names)

    def _wake(self) -> None:  # the feed's thread
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop has closed
            self.loop.call_soon_threadsafe(self._dispatch)

    def _dispatch(self) -> None:  # the loop
        with self._lock:
            self._scheduled = False
        watcher = self.watcher
        if watcher is None:
            return
        for change in watcher.take():
            item = None if change.state is None else _Item.of(change.state)
            for subscriber in self.subscribers:
                if subscriber.wants(change.name):
                    subscriber.changes[change.name] = item
                    subscriber.woken.set()


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Hub]] = (
    weakref.WeakKeyDictionary()
)


def _hub() -> _Hub:
    loop = asyncio.get_running_loop()
    by_alias = _hubs.setdefault(loop, {})
    alias = conf.DATABASE
    if alias not in by_alias:
        by_alias[alias] = _Hub(loop)
    return by_alias[alias]


async def _stream(
    names: frozenset[str] | None, access: _Access, last_id: str | None
) -> AsyncIterator[str]:
    hub = _hub()
    # Watching before the first read: a change in between is not lost.
    subscriber = hub.subscribe(names)
    try:
        interval = progress_interval()
        keepalive = float(conf.EVENTS_KEEPALIVE)
        current = await sync_to_async(_closing(_snapshot))(names)
        yield "retry: 2000\n\n"
        sent: dict[str, _Item] = {}
        if last_id is not None and last_id == _digest(current):
            sent = dict(current)  # the client has all of it
        else:
            for name, each in current.items():
                sent[name] = each
                yield _state_event(sent, each)
        pending: dict[str, _Item | None] = {}
        last_at: dict[str, float] = {}
        next_keepalive = time.monotonic() + keepalive
        while True:
            if pending:  # progress held back: woken when the first is due
                due = min(last_at.get(name, 0.0) + interval for name in pending)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, due - time.monotonic())):
                        await subscriber.woken.wait()
            else:  # by a change, or by the hub's ticker for the keepalive
                subscriber.keepalive_at = next_keepalive
                await subscriber.woken.wait()
            subscriber.woken.clear()
            pending.update(subscriber.changes)
            subscriber.changes.clear()
            now = time.monotonic()
            for name, pending_item in list(pending.items()):
                if (
                    _progress_only(sent.get(name), pending_item)
                    and now - last_at.get(name, 0) < interval
                ):
                    continue  # progress, again too soon: the newest goes out when it's due
                del pending[name]
                last_at[name] = now
                if pending_item is None:
                    if sent.pop(name, None) is not None:
                        body = json.dumps({"name": name}, separators=(",", ":"))
                        yield _event("removed", body, _digest(sent))
                elif not _same(pending_item, sent.get(name)):
                    sent[name] = pending_item
                    yield _state_event(sent, pending_item)
            if now >= next_keepalive:
                if not await access.allowed():
                    yield 'event: end\ndata: {"error": "The stream\'s access ended."}\n\n'
                    return
                yield ": keepalive\n\n"
                # Heartbeats are no change: their ages come with the keepalive,
                # from the feed's latest read, for a page that shows them.
                ages = hub.heartbeat_ages(sent.keys())
                if ages:
                    body = json.dumps(ages, separators=(",", ":"))
                    yield f"event: heartbeats\ndata: {body}\n\n"
                next_keepalive = now + keepalive
    finally:
        hub.unsubscribe(subscriber)


def _response(
    names: frozenset[str] | None, access: _Access, request: HttpRequest
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        _stream(names, access, request.headers.get("Last-Event-ID")),
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


class _SharedChecks:
    """Access checks shared by a process's streams: each session (or
    ``Authorization`` header) is checked at most once per keepalive
    interval, whichever of its streams asks first; the others take that
    answer. The per-key lock makes a crowd of streams wait for one check
    instead of each making its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._answers: dict[str, tuple[float, bool]] = {}

    def fresh(self, key: str) -> bool | None:
        """The answer for ``key`` if one is fresh, else ``None``: no database,
        no thread, so a stream's event loop can ask first."""
        found = self._answers.get(key)
        if found is not None and time.monotonic() - found[0] < float(conf.EVENTS_KEEPALIVE):
            return found[1]
        return None

    def check(self, key: str, work: Callable[[], bool]) -> bool:
        fresh_for = float(conf.EVENTS_KEEPALIVE)
        with self._lock:
            self._forget_older_than(2 * fresh_for)
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            found = self._answers.get(key)
            if found is not None and time.monotonic() - found[0] < fresh_for:
                return found[1]
            answer = work()
            self._answers[key] = (time.monotonic(), answer)
            return answer

    def _forget_older_than(self, seconds: float) -> None:
        now = time.monotonic()
        for key in [key for key, (at, _) in self._answers.items() if now - at > seconds]:
            self._answers.pop(key, None)
            lock = self._key_locks.get(key)
            if lock is not None and not lock.locked():
                del self._key_locks[key]


_shared_checks = _SharedChecks()


@dataclass(frozen=True)
class _Access:
    """How a stream's access is checked again at each keepalive: ``check``
    reads it afresh; with a ``key``, the answer is shared by the process's
    streams of that key (:class:`_SharedChecks`); with ``local``, it needs no
    database (a watch URL's expiry) and runs on the event loop."""

    check: Callable[[], bool]
    key: str | None = None
    local: bool = False

    async def allowed(self) -> bool:
        if self.local:
            return self.check()
        if self.key is not None:
            fresh = _shared_checks.fresh(self.key)
            if fresh is not None:
                return fresh
            shared = functools.partial(_shared_checks.check, self.key, self.check)
            return await sync_to_async(_closing(shared))()
        return await sync_to_async(_closing(self.check))()


def _session_access(request: HttpRequest) -> _Access:
    """Whether the stream's user may still see tasks, read afresh (at most
    once per keepalive per process and session): their session (or
    ``Authorization`` hook) and their permissions."""
    by_hook = getattr(request, "_bgtasks_by_hook", False)
    session_key = getattr(getattr(request, "session", None), "session_key", None)

    def by_session() -> bool:
        probe = HttpRequest()
        probe.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        return allowed(get_user(probe), "view")

    def by_authorization() -> bool:
        request.user = AnonymousUser()
        authentication.authenticate(request)
        return user_may(request, "view")

    if by_hook:
        header = request.headers.get("Authorization")
        if header is None:  # a hook that reads something else: this stream's own check
            return _Access(by_authorization)
        return _Access(by_authorization, "hook:" + hashlib.sha256(header.encode()).hexdigest())
    if session_key is None:
        return _Access(lambda: False, local=True)
    return _Access(by_session, f"session:{session_key}")


async def _open(request: HttpRequest, names: frozenset[str] | None) -> HttpResponseBase:
    refused = await sync_to_async(_closing(access_refusal))(request, "view")
    if refused is not None:
        return refused
    # Only those who may watch learn what this server can serve.
    needs_asgi = _needs_asgi(request, reverse("bgtasks:list"))
    if needs_asgi is not None:
        return needs_asgi
    return _response(names, _session_access(request), request)


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
    refused = await sync_to_async(_closing(access_refusal))(request, "view")
    if refused is not None:
        return refused
    needs_asgi = _needs_asgi(request, reverse("bgtasks:task", args=[name]))
    if needs_asgi is not None:
        return needs_asgi
    if await sync_to_async(_closing(operations.task_state))(name) is None:
        return error(404, f"No task named {name!r} has run.")
    return _response(frozenset([name]), _session_access(request), request)


@outside_request_transactions
@endpoint("GET", "HEAD")
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
    if await sync_to_async(_closing(operations.task_state))(name) is None:
        return error(404, f"No task named {name!r} has run.")
    return _response(frozenset([name]), _Access(lambda: time.time() < until, local=True), request)
