"""Lease changes, pushed to whatever in this process watches them.

One :class:`Feed` per process and database alias, started by its first
watcher and shared by all of them, runs one daemon thread:

* **PostgreSQL**: one listening connection (``LISTEN bgtasks_changes``, which
  migration 0008's trigger notifies for every change of a lease row but a
  bare heartbeat). For each notification the feed reads that task's state
  once and hands it to every watcher of the name. When the connection drops
  (a restart, a failover, ``pg_terminate_backend``), the feed reconnects by
  itself, backing off up to 5 s, and then re-reads every state (a *resync*):
  a notification lost in the gap costs a re-read, never a missed change. A
  holder that goes silent writes nothing, so the feed also re-reads a running
  task when its ttl runs out, and its watchers see it turn stale.
* **SQLite and MySQL**, and PostgreSQL behind a transaction-pooling PgBouncer
  (``DISABLE_SERVER_SIDE_CURSORS``, where a ``LISTEN`` would stay on one
  server connection): no notifications; the feed reads every state, one
  statement, each ``BGTASKS_CHANGES_POLL_INTERVAL`` while anyone watches.

Either way watchers never query, so the database's load is one feed per
process, whatever the number of watchers. A change is delivered when a
task's state differs from the last one the feed saw, heartbeat times aside;
every :class:`Change` carries the whole new state.

The PostgreSQL listener also hears migration 0010's ``bgtasks_queue``: a
Django Task became ready. :func:`watch_queue` calls its ``wake`` for those of
its queues (and once after each reconnect, for what the gap may have hidden),
with no read; elsewhere nothing calls it, and the queue's own poll stands.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from django.db import DatabaseError, connections

from django_bgtasks.conf import conf
from django_bgtasks.core import store
from django_bgtasks.core.states import TaskState
from django_bgtasks.db import engines
from django_bgtasks.db import params as params_of
from django_bgtasks.db.cursor import behind_transaction_pooling, direct_session
from django_bgtasks.db.postgresql import notify

logger = logging.getLogger("django_bgtasks.changes")

MAX_BACKOFF = 5.0
# The longest the PostgreSQL listener waits without checking for a stop or a
# lease running out.
LISTEN_SLICE = 1.0
# How often the PostgreSQL listener reads every state all the same: heartbeats
# notify nobody, so this keeps heartbeat_ages() current (one statement per
# process), and it would heal a change lost without the connection dropping.
RESYNC_INTERVAL = 5.0


@dataclass(frozen=True)
class Change:
    """Task ``name`` changed: ``state`` is its new state (``None``: no row any more)."""

    name: str
    state: TaskState | None


# What a state may differ by and still be no change: its heartbeat times.
# (The event streams judge their events by the same rule.)
HEARTBEAT_FIELDS = ("heartbeat_age", "updated_at")


def _key(state: TaskState | None) -> str | None:
    """What a change is judged by: the state without its heartbeat times."""
    if state is None:
        return None
    data = {key: value for key, value in state.as_json().items() if key not in HEARTBEAT_FIELDS}
    return json.dumps(data, sort_keys=True, default=str)


class Watcher:
    """Changes of some tasks (``names``; ``None`` for all), as they arrive.

    ``wait()`` blocks until there is one; ``take()`` hands over those that
    came and clears the wait. ``wake``, if given, is called from the feed's
    thread at each change (e.g. ``loop.call_soon_threadsafe(event.set)``).
    A ``with`` block, or ``close()``, stops the watching.
    """

    def __init__(
        self, feed: Feed, names: frozenset[str] | None, wake: Callable[[], None] | None
    ) -> None:
        self.feed, self.names, self._wake = feed, names, wake
        self._lock = threading.Lock()
        self._changes: list[Change] = []
        self._event = threading.Event()

    def wants(self, name: str) -> bool:
        return self.names is None or name in self.names

    def push(self, change: Change) -> None:
        with self._lock:
            self._changes.append(change)
        self._event.set()
        if self._wake is not None:
            self._wake()

    def wait(self, timeout: float | None) -> bool:
        """Block until a change came (``True``) or ``timeout`` seconds passed."""
        return self._event.wait(timeout)

    def take(self) -> list[Change]:
        """The changes that came since the last ``take()``, oldest first."""
        with self._lock:
            self._event.clear()
            changes, self._changes = self._changes, []
        return changes

    def close(self) -> None:
        self.feed.forget(self)

    def __enter__(self) -> Watcher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class QueueWatcher:
    """Calls ``wake`` when a Django Task of one of ``queues`` (``None``: any)
    becomes ready, from the feed's thread; ``close()`` stops it."""

    def __init__(
        self, feed: Feed, queues: frozenset[str] | None, wake: Callable[[], None]
    ) -> None:
        self.feed, self.queues, self.wake = feed, queues, wake

    def wants(self, queue: str | None) -> bool:
        return queue is None or self.queues is None or queue in self.queues

    def close(self) -> None:
        self.feed.forget_queue(self)


class Feed:
    """The changes of the lease table on database ``alias``, for this process."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.connects = 0  # how often the listener connected: diagnostics and tests
        self.listener_pid: int | None = None  # its server process (PostgreSQL)
        self.synced = threading.Event()  # set after the first full read
        self._lock = threading.Lock()
        self._watchers: set[Watcher] = set()
        self._queue_watchers: set[QueueWatcher] = set()
        self._keys: dict[str, str | None] = {}
        self._stale_at: dict[str, float] = {}  # monotonic time a running lease runs out
        self._ages: dict[str, tuple[float | None, float]] = {}  # heartbeat age, read at
        self._resynced_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- for watchers ------------------------------------------------------------

    def watch(
        self, names: Iterable[str] | None = None, *, wake: Callable[[], None] | None = None
    ) -> Watcher:
        """A :class:`Watcher` of ``names`` (all tasks if ``None``), from now on."""
        watcher = Watcher(self, None if names is None else frozenset(names), wake)
        with self._lock:
            self._watchers.add(watcher)
            self._start()
        return watcher

    def watch_queue(
        self, queues: Iterable[str] | None = None, *, wake: Callable[[], None]
    ) -> QueueWatcher:
        """Call ``wake`` when a Django Task of ``queues`` (any if ``None``)
        becomes ready: PostgreSQL only (migration 0010); elsewhere never."""
        watcher = QueueWatcher(self, None if queues is None else frozenset(queues), wake)
        with self._lock:
            self._queue_watchers.add(watcher)
            self._start()
        return watcher

    def _start(self) -> None:
        # Under self._lock.
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name=f"bgtasks-changes-{self.alias}", daemon=True
            )
            self._thread.start()

    def heartbeat_ages(self, names: Iterable[str] | None = None) -> dict[str, float | None]:
        """Each task's heartbeat age now, from the feed's latest read (at most
        ``RESYNC_INTERVAL`` old on PostgreSQL, a poll's interval elsewhere):
        heartbeats are no change, and reach watchers only this way."""
        now = time.monotonic()
        with self._lock:
            ages = dict(self._ages)
        wanted = ages.keys() if names is None else set(names) & ages.keys()
        found: dict[str, float | None] = {}
        for name in sorted(wanted):
            age, read_at = ages[name]
            found[name] = None if age is None else age + now - read_at
        return found

    def forget(self, watcher: Watcher) -> None:
        with self._lock:
            self._watchers.discard(watcher)

    def forget_queue(self, watcher: QueueWatcher) -> None:
        with self._lock:
            self._queue_watchers.discard(watcher)

    def stop(self, timeout: float = 5.0) -> None:
        """End the feed's thread and close its connections."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    # --- the thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            connection = connections[self.alias]
            # Behind transaction pooling a LISTEN would stay on whichever
            # server connection ran it, and hear nothing: poll there. Most
            # such sites don't say so in their settings: _listen() finds out.
            listens = engines.driver(connection).listens and not behind_transaction_pooling(
                connection
            )
            if not (listens and self._listen()):
                self._poll()
        finally:
            # This thread's own connections only.
            for connection in connections.all(initialized_only=True):
                connection.close()

    def _poll(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                watched = bool(self._watchers)
            if watched:
                self._guarded(self._resync)
            self._stop.wait(conf.CHANGES_POLL_INTERVAL)

    def _listen(self) -> bool:
        """Listen until stopped (``True``), or answer ``False`` at once when the
        listener's connection goes through a proxy or pooler."""
        import psycopg

        backoff = 0.1
        while not self._stop.is_set():
            try:
                listener = _listener(self.alias, psycopg)
            except psycopg.Error as exc:
                logger.warning("bgtasks: change listener cannot connect (%s); retrying", exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            if listener is None:
                logger.warning(
                    "bgtasks: the change feed of the %r database polls every %g s "
                    "(BGTASKS_CHANGES_POLL_INTERVAL) instead of listening: its connection "
                    "goes through a proxy or pooler, where a LISTEN would hear nothing "
                    "(docs/operations.md)",
                    self.alias,
                    conf.CHANGES_POLL_INTERVAL,
                )
                return False
            self.listener_pid = listener.info.backend_pid
            try:
                self.connects += 1
                # Whatever changed while nobody listened: read it all, and
                # let the queue's threads look once.
                if not self._guarded(self._resync):
                    continue
                self._queue_ready(None)
                backoff = 0.1
                while not self._stop.is_set():
                    for notification in listener.notifies(timeout=self._slice()):
                        if notification.channel == notify.QUEUE_CHANNEL:
                            self._queue_ready(_notified(notification.payload, "queue", "queue"))
                            continue
                        name = _notified(notification.payload, "name", "change")
                        if name is not None:
                            self._guarded(functools.partial(self._refresh, name))
                    self._refresh_ran_out()
                    if time.monotonic() - self._resynced_at >= RESYNC_INTERVAL:
                        self._guarded(self._resync)
            except psycopg.Error as exc:
                logger.warning("bgtasks: change listener lost its connection (%s)", exc)
                self._stop.wait(backoff)
            finally:
                self.listener_pid = None
                listener.close()
        return True

    def _queue_ready(self, queue: str | None) -> None:
        """A Django Task of ``queue`` (``None``: of any) may be ready: wake its watchers."""
        with self._lock:
            watchers = [watcher for watcher in self._queue_watchers if watcher.wants(queue)]
        for watcher in watchers:
            watcher.wake()

    def _slice(self) -> float:
        now = time.monotonic()
        with self._lock:
            first = min(self._stale_at.values(), default=now + LISTEN_SLICE)
        return max(0.0, min(LISTEN_SLICE, first - now))

    def _guarded(self, read: Callable[[], None]) -> bool:
        """Run ``read``; on a database error, log it, drop this thread's
        connection (the next read reconnects) and answer ``False``."""
        try:
            read()
        except DatabaseError as exc:
            logger.warning("bgtasks: change feed could not read the leases (%s)", exc)
            connections[self.alias].close()
            return False
        return True

    # --- reading and handing out ------------------------------------------------------

    def _resync(self) -> None:
        rows = store.read(params_of.ListStates(), using=self.alias)
        states = {state.name: state for state in map(TaskState.from_row, rows)}
        for name in set(self._keys) - set(states):
            self._seen(name, None)
        for name, state in states.items():
            self._seen(name, state)
        self._resynced_at = time.monotonic()
        self.synced.set()

    def _refresh(self, name: str) -> None:
        rows = store.read(params_of.GetState(name), using=self.alias)
        self._seen(name, TaskState.from_row(rows[0]) if rows else None)

    def _refresh_ran_out(self) -> None:
        now = time.monotonic()
        with self._lock:
            ran_out = [name for name, at in self._stale_at.items() if at <= now]
        for name in ran_out:
            self._guarded(functools.partial(self._refresh, name))

    def _seen(self, name: str, state: TaskState | None) -> None:
        key = _key(state)
        with self._lock:
            if state is None:
                self._ages.pop(name, None)
            else:
                self._ages[name] = (state.heartbeat_age, time.monotonic())
            if state is not None and state.running:
                left = state.ttl - (state.heartbeat_age or 0.0)
                self._stale_at[name] = time.monotonic() + max(left, 0.0) + 0.01
            else:
                self._stale_at.pop(name, None)
            if name in self._keys and self._keys[name] == key:
                return
            if state is None:
                self._keys.pop(name, None)
            else:
                self._keys[name] = key
            watchers = [watcher for watcher in self._watchers if watcher.wants(name)]
        change = Change(name, state)
        for watcher in watchers:
            watcher.push(change)


def _listener(alias: str, psycopg: Any) -> Any:
    """A connection of ``alias`` listening on both channels, or ``None``
    (closed) when it is not a direct one (db.cursor.direct_session), where a
    LISTEN would not last."""
    params = dict(connections[alias].get_connection_params())
    params.pop("autocommit", None)
    listener = psycopg.connect(**params, autocommit=True)
    try:
        if not direct_session(listener):
            listener.close()
            return None
        # Named only once proved direct: a pooler would keep the name on its
        # server connection, and operators would count a listener that isn't.
        listener.execute(notify.NAME_APPLICATION, [notify.CHANGES_APPLICATION])
        listener.execute(notify.LISTEN_CHANGES)
        listener.execute(notify.LISTEN_QUEUE)
    except BaseException:
        # The caller retries on a new connection: this one must not stay open.
        listener.close()
        raise
    return listener


def _notified(payload: str, key: str, kind: str) -> str | None:
    """``key`` of a notification's JSON payload: a ``bgtasks_changes`` task's
    name, a ``bgtasks_queue`` queue. ``None`` if unreadable (for a queue:
    wake every queue)."""
    try:
        found = json.loads(payload)[key]
    except (ValueError, KeyError, TypeError):
        logger.warning("bgtasks: unexpected %s notification %r", kind, payload)
        return None
    return found if isinstance(found, str) else None


_feeds: dict[tuple[int, str], Feed] = {}
_feeds_lock = threading.Lock()


def feed(using: str | None = None) -> Feed:
    """This process's feed for the alias ``using`` (default ``BGTASKS_DATABASE``)."""
    alias = conf.DATABASE if using is None else using
    key = (os.getpid(), alias)  # a forked child starts its own
    with _feeds_lock:
        found = _feeds.get(key)
        if found is None:
            found = _feeds[key] = Feed(alias)
        return found


def watch(
    names: Iterable[str] | None = None,
    *,
    wake: Callable[[], None] | None = None,
    using: str | None = None,
) -> Watcher:
    """Watch the changes of ``names`` (every task if ``None``): ``feed(using).watch(...)``."""
    return feed(using).watch(names, wake=wake)


def watch_queue(
    queues: Iterable[str] | None = None,
    *,
    wake: Callable[[], None],
    using: str | None = None,
) -> QueueWatcher:
    """``wake()`` when a Django Task of ``queues`` becomes ready (PostgreSQL):
    ``feed(using).watch_queue(...)``."""
    return feed(using).watch_queue(queues, wake=wake)


def stop_feeds() -> None:
    """Stop every feed of this process (tests; a process that is ending)."""
    with _feeds_lock:
        feeds = list(_feeds.values())
        _feeds.clear()
    for each in feeds:
        each.stop()
