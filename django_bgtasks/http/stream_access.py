"""How an open event stream's access is checked again, at each keepalive.

A stream's access is the JSON API's rule
(:func:`django_bgtasks.http.access.access_refusal`), checked when it opens. It
is checked again at each keepalive: a session that ended (logout, a new
password), a user who lost the permission, or an expired watch URL ends the
stream with ``event: end``. That check is shared: a process checks each
session (or ``Authorization`` header) at most once per keepalive interval,
whatever the number of its streams, so an operator's ten tabs cost one
check, and a stream learns of a logout within two keepalives.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest

from django_bgtasks import authentication
from django_bgtasks.conf import conf
from django_bgtasks.http.stream import in_read_slot
from django_bgtasks.operations.permissions import allowed, user_may


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
class Access:
    """How a stream's access is checked again at each keepalive: ``check``
    reads it afresh; with a ``key``, the answer is shared by the process's
    streams of that key (:class:`_SharedChecks`); with ``local``, it needs no
    database (a watch URL's expiry) and runs on the event loop."""

    check: Callable[[], bool]
    key: str | None = None
    local: bool = False

    async def allowed(self) -> bool:
        """Whether the stream may go on (its event loop awaits this at a keepalive)."""
        if self.local:
            return self.check()
        if self.key is not None:
            fresh = _shared_checks.fresh(self.key)
            if fresh is not None:
                return fresh
            shared = functools.partial(_shared_checks.check, self.key, self.check)
            return await sync_to_async(in_read_slot(shared))()
        return await sync_to_async(in_read_slot(self.check))()


def session_access(request: HttpRequest) -> Access:
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
            return Access(by_authorization)
        return Access(by_authorization, "hook:" + hashlib.sha256(header.encode()).hexdigest())
    if session_key is None:
        return Access(lambda: False, local=True)
    return Access(by_session, f"session:{session_key}")
