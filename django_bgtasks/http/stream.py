"""The event stream's machinery: how the streams of
:mod:`django_bgtasks.http.events` are sent (the events it describes), and how
a process serves many of them.

A stream's events are rendered from :mod:`django_bgtasks.push.feed`'s
changes, each task's progress held back to one per
``BGTASKS_PROGRESS_INTERVAL``; at each keepalive the stream asks its
``allowed`` check again (:mod:`django_bgtasks.http.stream_access`) and ends
with ``event: end`` when the answer is no. An event's ``id`` is
:func:`_digest` of every watched task's state as the client then has it.

What scales with the number of streams is kept off the database and out of
the per-stream path: a process's streams on one event loop share one
:class:`~django_bgtasks.push.feed.Watcher` (woken once per change, not once per
stream); each change is rendered once (its JSON, its event text, its digest)
for every stream that sends it; and the reads a stream makes (its access
check, its opening states) run at most ``READ_SLOTS`` at a time per process
(:func:`in_read_slot`), so a thousand streams opening at once queue for a
moment instead of opening a thousand database connections.
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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections
from django.http import HttpRequest, StreamingHttpResponse

from django_bgtasks.conf import conf
from django_bgtasks.core.states import TaskState
from django_bgtasks.operations import task_reads
from django_bgtasks.push import feed as changes
from django_bgtasks.validation import progress_interval

_T = TypeVar("_T")
# How many of a process's streams may read the database at once (an access
# check, an opening read): each read holds a connection for a moment.
READ_SLOTS = 8
_read_slots = threading.BoundedSemaphore(READ_SLOTS)


@dataclass(frozen=True)  # cached_property writes past frozen's __setattr__
class _Item:
    """One task's state as the streams send it, rendered once for all of them."""

    name: str
    data: dict[str, Any]  # task_reads.task_json(); shared, never changed
    body: str  # the data as compact JSON, which never holds a raw newline
    tag: bytes  # a digest of the data, heartbeat times aside
    run: tuple[Any, ...]  # what tells one run's progress from another run

    @classmethod
    def of(cls, state: TaskState) -> _Item:
        data = task_reads.task_json(state)
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


def in_read_slot(work: Callable[..., _T]) -> Callable[..., _T]:
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
        states = task_reads.task_states()
    else:
        states = [s for s in map(task_reads.task_state, sorted(names)) if s is not None]
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
    names: frozenset[str] | None, allowed: Callable[[], Awaitable[bool]], last_id: str | None
) -> AsyncIterator[str]:
    hub = _hub()
    # Watching before the first read: a change in between is not lost.
    subscriber = hub.subscribe(names)
    try:
        interval = progress_interval()
        keepalive = float(conf.EVENTS_KEEPALIVE)
        current = await sync_to_async(in_read_slot(_snapshot))(names)
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
                if not await allowed():
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


def stream_response(
    names: frozenset[str] | None, allowed: Callable[[], Awaitable[bool]], request: HttpRequest
) -> StreamingHttpResponse:
    """The stream of the tasks ``names`` (``None``: every task), which ends
    when ``allowed()`` answers no at a keepalive."""
    response = StreamingHttpResponse(
        _stream(names, allowed, request.headers.get("Last-Event-ID")),
        content_type="text/event-stream",
    )
    response.headers["Cache-Control"] = "private, no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response
