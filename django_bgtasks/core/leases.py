"""The lease operations: ``BackgroundTask.objects``, the holder's here, the
operator's requests and the reads in :mod:`django_bgtasks.core.requests`.

Each operation validates its arguments (raising ``ValueError``/``TypeError``
before any SQL), then runs exactly one statement from :mod:`django_bgtasks.db`
(through :mod:`django_bgtasks.core.store`) on the ``BGTASKS_DATABASE``
connection, in autocommit: when a write returns, it is committed and every
replica sees it. A write inside ``transaction.atomic()`` is refused with
:class:`~django_bgtasks.exceptions.InAtomicBlock` rather than left to be
rolled back with the caller's transaction; see docs/api.md.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import secrets
import socket
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections, models
from django.utils import timezone

from django_bgtasks.choices import Outcome, Trigger
from django_bgtasks.conf import conf
from django_bgtasks.core import store
from django_bgtasks.core.claims import WorkQueue
from django_bgtasks.core.requests import OperatorRequests
from django_bgtasks.core.states import Lease, Renewal, TaskState
from django_bgtasks.db import params as params_of
from django_bgtasks.db import read_database
from django_bgtasks.exceptions import FenceOnOtherDatabase, InAtomicBlock, NotInAtomicBlock
from django_bgtasks.limits import HOST_LENGTH
from django_bgtasks.validation import (
    clean_error,
    encode_result,
    encode_value,
    validate_name,
    validate_outcome,
    validate_owner,
    validate_token,
    validate_ttl,
    validate_wait,
)

if TYPE_CHECKING:
    from django_bgtasks.models import BackgroundTask, TaskRun  # noqa: F401  (named in QuerySet[...])

__all__ = [
    "KEEP_VALUE",
    "Lease",
    "LeaseManager",
    "Renewal",
    "RunQuerySet",
    "TaskState",
    "default_owner",
]

# "Leave the value as it is", as distinct from None (store NULL).
KEEP_VALUE: Any = object()


_S = TypeVar("_S")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def async_twin(
    method: Callable[Concatenate[_S, _P], _R],
) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]:
    """``method`` for async code: the same arguments, run in asgiref's sync
    thread (``sync_to_async``), so that ASGI code can await a lease operation."""

    async def twin(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await sync_to_async(method)(self, *args, **kwargs)

    functools.update_wrapper(twin, method)  # the signature, for help() and docs
    twin.__doc__ = f":meth:`{method.__name__}` for async code."
    twin.__name__ = twin.__qualname__ = f"a{method.__name__}"
    return twin


_owner_for_pid: tuple[int, str] | None = None


def host_name() -> str:
    """This machine's name as the default owner and the worker's row state it:
    cut at ``limits.HOST_LENGTH`` (so that the owner fits its column), and
    ``localhost`` when the system has none."""
    return socket.gethostname()[:HOST_LENGTH] or "localhost"


def default_owner() -> str:
    """``host:pid:random``, unique per process start (and fresh after a fork)."""
    global _owner_for_pid
    pid = os.getpid()
    if _owner_for_pid is None or _owner_for_pid[0] != pid:
        _owner_for_pid = (pid, f"{host_name()}:{pid}:{secrets.token_hex(4)}")
    return _owner_for_pid[1]


class LeaseManager(OperatorRequests, models.Manager["BackgroundTask"]):
    """The atomic lease operations. Each is one SQL statement and one round trip.

    The holder's operations are here; the operator's requests and the reads
    are :class:`~django_bgtasks.core.requests.OperatorRequests`'."""

    def get_queryset(self) -> models.QuerySet[BackgroundTask]:
        """ORM reads of the lease table, on the ``BGTASKS_DATABASE`` alias
        (inside an operator's list, the read database: db/read_database.py)."""
        # ORM reads (the admin, the history) go where the leases live.
        return super().get_queryset().using(read_database.alias())

    # --- holder operations ---------------------------------------------------

    def try_claim(
        self,
        name: str,
        owner: str | None = None,
        initial_value: Any = None,
        *,
        ttl: float | None = None,
        run_args: dict[str, Any] | None = None,
        wait: float | None = None,
    ) -> Lease | None:
        """Claim ``name`` if nobody holds it or its holder's heartbeat is older
        than the holder's ttl. Returns the :class:`Lease`, or ``None``.

        ``owner`` defaults to :func:`default_owner`. ``run_args``
        (``{"args": [...], "kwargs": {...}}``) is kept with the run, so that a
        worker that resumes it after a loss calls the task with the same ones.

        With ``wait`` (seconds), a held lease is waited for: the claim is tried
        again when the change feed (:mod:`django_bgtasks.push.feed`) reports the
        task changed (a release, an expiry), when the holder's ttl runs out,
        and in any case once per ttl, until it succeeds or ``wait`` seconds
        have passed. Each try is the one claim statement.
        """
        name = validate_name(name)
        owner = default_owner() if owner is None else validate_owner(owner)
        ttl = validate_ttl(ttl)
        wait = validate_wait(wait)
        params = params_of.Claim(
            name=name,
            owner=owner,
            value=encode_value(initial_value),
            ttl=ttl,
            trigger=Trigger.MANUAL.value,
            args=encode_value(run_args),
        )
        if not wait:
            sent = time.monotonic()
            rows = store.write("try_claim", params)
            return Lease(name, owner, int(rows[0]["token"]), ttl, sent) if rows else None
        if store.connection().in_atomic_block:
            raise InAtomicBlock("try_claim")
        return self._claim_waiting(params, wait)

    def _claim_waiting(self, params: params_of.Claim, wait: float) -> Lease | None:
        from django_bgtasks.push import (
            feed as changes,  # the feed's thread starts only for a waiting claim
        )

        name, owner, ttl = params.name, params.owner, params.ttl
        deadline = time.monotonic() + wait
        # Watching before the first try: a release between a failed try and
        # the wait is a change already queued, so the wait returns at once.
        with changes.watch([name], using=conf.DATABASE) as watcher:
            while True:
                watcher.take()
                sent = time.monotonic()
                rows = store.write("try_claim", params)
                if rows:
                    return Lease(name, owner, int(rows[0]["token"]), ttl, sent)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                # A lost notification costs at most a poll at the ttl's pace;
                # a silent holder's lease is tried again when it runs out.
                pause = min(left, ttl)
                state = self.get_state(name)
                if state is not None and state.running:
                    pause = min(pause, max(state.ttl - (state.heartbeat_age or 0.0), 0.0) + 0.01)
                    pause = min(pause, state.ttl)
                watcher.wait(pause)

    def renew(
        self, name: str, owner: str, *, token: int | None = None, value: Any = KEEP_VALUE
    ) -> Renewal | None:
        """Refresh the heartbeat (and write ``value``, if given) while ``owner``
        (with ``token``) holds the lease. Returns ``None`` when it does not, and
        then writes nothing. The runner uses this to see cancel requests."""
        name, owner, token = _holder(name, owner, token)
        if value is KEEP_VALUE:
            rows = store.write("heartbeat", params_of.Renew(name, owner, token))
        else:
            params = params_of.RenewWithValue(name, owner, token, encode_value(value))
            rows = store.write("update_state", params)
        return Renewal(cancel_requested=bool(rows[0]["cancel_requested"])) if rows else None

    def update_state(self, name: str, owner: str, value: Any, *, token: int | None = None) -> bool:
        """Write ``value`` and refresh the heartbeat. ``False``, with nothing
        written, when the caller no longer holds the lease."""
        return self.renew(name, owner, token=token, value=value) is not None

    def heartbeat(self, name: str, owner: str, *, token: int | None = None) -> bool:
        """Refresh the heartbeat only. ``False`` when the caller no longer holds the lease."""
        return self.renew(name, owner, token=token) is not None

    def release(
        self,
        name: str,
        owner: str,
        final_value: Any = None,
        *,
        token: int | None = None,
        outcome: str = Outcome.SUCCEEDED,
        error: str = "",
        result: Any = None,
    ) -> bool:
        """End the holder's run and record it in history, in one statement.

        ``final_value`` of ``None`` keeps the last value. ``outcome`` is
        ``succeeded``, ``failed`` or ``cancelled``. ``result`` (what the run's
        function returned) is stored with the run, as JSON; one that does not
        encode, or is larger than ``BGTASKS_MAX_VALUE_BYTES``, is stored as
        ``None`` with ``result_note`` saying why, and never keeps the run from
        ending. Only the current holder can release; anyone else gets
        ``False`` and nothing is written.
        """
        name, owner, token = _holder(name, owner, token)
        encoded, note = encode_result(result)
        params = params_of.Release(
            name=name,
            owner=owner,
            token=token,
            value=encode_value(final_value),
            outcome=validate_outcome(outcome),
            error=clean_error(error),
            result=encoded,
            result_note=note,
        )
        return bool(store.write("release", params))

    def fence(self, name: str, owner: str, token: int, *, using: str | None = None) -> bool:
        """Inside the caller's ``transaction.atomic()``: lock the lease row until
        that transaction ends, if ``owner`` still holds a live lease with
        ``token``. While it is locked, no takeover can happen, so the caller's
        writes commit only while the lease is theirs. ``False`` if not held.

        Only writes to the lease database (``BGTASKS_DATABASE``) are guarded,
        because only they share the lock's transaction. ``using`` names the
        alias the caller writes to. When it is another alias, or (without
        ``using``) a transaction is open on another alias,
        :class:`~django_bgtasks.exceptions.FenceOnOtherDatabase` is raised
        before any SQL. Pass ``using=BGTASKS_DATABASE`` to say that, although
        other transactions are open, the fenced writes are on the lease database.
        """
        params = params_of.Fence(*_holder(name, owner, token))
        if params.token is None:
            raise TypeError("fence() needs the lease's token")
        alias = conf.DATABASE
        if using is not None and using != alias:
            raise FenceOnOtherDatabase(alias, [using])
        connection = store.connection()
        if using is None:
            others = sorted(
                other.alias
                for other in connections.all(initialized_only=True)
                if other.alias != alias and other.in_atomic_block
            )
            if others:
                raise FenceOnOtherDatabase(alias, others)
        if not connection.in_atomic_block:
            raise NotInAtomicBlock("fence")
        return bool(store.read(params, using=alias))

    @property
    def work(self) -> WorkQueue:
        """The workers' own lease operations (claims of due work, their heartbeats)."""
        return WorkQueue()

    # --- async twins: each runs the sync method in asgiref's sync thread -------

    atry_claim = async_twin(try_claim)
    arenew = async_twin(renew)
    aupdate_state = async_twin(update_state)
    aheartbeat = async_twin(heartbeat)
    arelease = async_twin(release)
    arequest_run = async_twin(OperatorRequests.request_run)
    aget_state = async_twin(OperatorRequests.get_state)
    alist_states = async_twin(OperatorRequests.list_states)
    aforce_release = async_twin(OperatorRequests.force_release)
    arequest_cancel = async_twin(OperatorRequests.request_cancel)


def _holder(name: str, owner: str, token: int | None) -> tuple[str, str, int | None]:
    """A holder's name, owner and token, checked."""
    return validate_name(name), validate_owner(owner), validate_token(token)


class RunQuerySet(models.QuerySet["TaskRun"]):
    """Run history, read from the ``BGTASKS_DATABASE`` alias."""

    def for_task(self, name: str) -> RunQuerySet:
        """The runs of task ``name``, newest (highest token) first (inside an
        operator's list, from the read database)."""
        return self.using(read_database.alias()).filter(name=name).order_by("-token")

    def older_than(self, days: float) -> RunQuerySet:
        """Runs that finished more than ``days`` ago, except each task's newest
        run, which is kept so that a name's tokens keep rising even if its lease
        row is ever deleted by hand."""
        cutoff = timezone.now() - dt.timedelta(days=days)
        newest = (
            self.model._default_manager.using(conf.DATABASE)
            .filter(name=models.OuterRef("name"))
            .order_by("-token")
            .values("token")[:1]
        )
        return (
            self.using(conf.DATABASE)
            .filter(finished_at__lt=cutoff)
            .exclude(token=models.Subquery(newest))
        )
