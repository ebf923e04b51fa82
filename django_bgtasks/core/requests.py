"""The operator's side of ``BackgroundTask.objects``: what anyone may ask of a
task they don't hold (a run by a worker, a cancel, an end to its run), and
the reads of every task's state.

:class:`OperatorRequests` is a part of
:class:`~django_bgtasks.core.leases.LeaseManager`, which adds the holder's
operations. Like those, each method validates its arguments before any SQL
and runs one statement (:mod:`django_bgtasks.core.store`); a write in
autocommit, refused inside ``transaction.atomic()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_bgtasks import tracing
from django_bgtasks.background import registry
from django_bgtasks.choices import Outcome
from django_bgtasks.core import store
from django_bgtasks.core.claims import WorkQueue
from django_bgtasks.core.states import TaskState
from django_bgtasks.db import params as params_of
from django_bgtasks.exceptions import UnknownTask
from django_bgtasks.limits import MAX_OWNER_LENGTH
from django_bgtasks.validation import (
    check_arguments,
    clean_error,
    encode_value,
    validate_args,
    validate_kwargs,
    validate_name,
    validate_token,
    validate_ttl,
)


class OperatorRequests:
    """The operator operations and the reads of ``BackgroundTask.objects``."""

    # --- operator operations -------------------------------------------------

    def force_release(self, name: str, *, token: int | None = None) -> bool:
        """End whoever holds ``name`` (outcome ``released-by-operator``). The
        old holder's later heartbeat, update and release then fail.

        With ``token``, only that claim is ended: an operator who confirmed
        releasing the run they saw never ends a newer one that took over since.
        """
        params = params_of.ForceRelease(
            name=validate_name(name),
            token=validate_token(token),
            outcome=Outcome.RELEASED_BY_OPERATOR.value,
            error="released by an operator",
        )
        return bool(store.write("force_release", params))

    def request_cancel(self, name: str, *, token: int | None = None) -> bool:
        """Ask a live holder to stop; it sees this on its next heartbeat.
        ``False`` when nobody holds the lease. A new claim clears the request.

        With ``token``, only that claim is asked: an operator who cancels the
        run they saw never cancels a newer one that took over since.
        """
        params = params_of.RequestCancel(validate_name(name), validate_token(token))
        return bool(store.write("request_cancel", params))

    def expire_stale(
        self,
        name: str | None = None,
        *,
        token: int | None = None,
        error: str = "lease expired: no heartbeat within the ttl",
    ) -> int:
        """End every lease whose holder went silent past its ttl (or only
        ``name``'s, with ``token`` only that claim), recording those runs as
        ``lost`` with ``error``. Returns how many. (A takeover does the same
        for one lease; this is for tasks nobody claims again.)"""
        params = params_of.ExpireStale(
            name=None if name is None else validate_name(name),
            token=validate_token(token),
            outcome=Outcome.LOST.value,
            error=clean_error(error),
        )
        return len(store.write("expire_stale", params))

    def request_run(
        self,
        name: str,
        *,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        requested_by: str = "",
        ttl: float | None = None,
    ) -> bool:
        """Ask the workers to run ``name`` with these arguments. ``False`` when
        a request is already pending (at most one per task). A request made
        while the task runs is kept and performed after that run; exactly one
        worker performs it.

        Refused with nothing written: a name no process runs, neither
        registered here nor reported by a ``bgtasks worker`` (:class:`UnknownTask`,
        a ``LookupError``); arguments the function registered here can't take
        (a ``TypeError``, as the call would raise; a task known only from a
        worker's report can't be checked here); arguments JSON can't encode
        (a ``TypeError``). ``ttl=None``: the registered task's, else
        ``BGTASKS_TTL``."""
        name = validate_name(name)
        args, kwargs = validate_args(args), validate_kwargs(kwargs)
        if not isinstance(requested_by, str):
            raise TypeError(f"requested_by must be a str, not {type(requested_by).__name__}")
        task = registry.get(name)
        if task is not None:
            check_arguments(task.func, args, kwargs, passed_first=True, task=repr(name))
            if ttl is None:
                ttl = task.ttl
        ttl = validate_ttl(ttl)
        request = encode_value({"args": args, "kwargs": kwargs})
        requested_by = clean_error(requested_by)[:MAX_OWNER_LENGTH]
        if task is None:
            _runnable(name)
        # A producer span; its context goes with the request, for the run's
        # span (django_bgtasks.tracing). Refusals above trace nothing.
        with tracing.send(tracing.REQUEST, name, {tracing.TASK: name}) as span:
            params = params_of.RequestRun(name, ttl, request, requested_by, span.context)
            accepted = bool(store.write("request_run", params))
            span.set(tracing.ACCEPTED, accepted)
        return accepted

    def pause(self, name: str) -> bool:
        """Pause ``name``: the workers start nothing of it (its pending and new
        requests are kept, a lost run's resume and a failed run's retry wait)
        until :meth:`unpause`; its schedule's slots that come meanwhile are
        skipped and counted, for the next run's ``skipped``. A run going on
        finishes as usual. ``False`` when it was paused already. Refused with
        nothing written: a name no process runs (:class:`UnknownTask`), as
        :meth:`request_run` refuses it."""
        name = validate_name(name)
        task = registry.get(name)
        if task is None:
            _runnable(name)
        ttl = validate_ttl(task.ttl if task is not None else None)
        return bool(store.write("pause", params_of.Pause(name, ttl)))

    def unpause(self, name: str) -> bool:
        """Let the workers start ``name`` again: what was owed meanwhile (a
        request, a resume, a retry) is claimed at their next poll, and the next
        slot of its schedule runs. ``False`` when it was not paused."""
        return bool(store.write("unpause", params_of.Unpause(validate_name(name))))

    # --- reads -----------------------------------------------------------------

    def get_state(self, name: str) -> TaskState | None:
        """The task's state as every replica sees it, or ``None`` if never claimed."""
        rows = store.read(params_of.GetState(validate_name(name)))
        return TaskState.from_row(rows[0]) if rows else None

    def list_states(self) -> list[TaskState]:
        """Every task's state, by name."""
        return [TaskState.from_row(row) for row in store.read(params_of.ListStates())]


def _runnable(name: str) -> None:
    """The one rule for "a worker will run it", for a name not registered in
    this process (the site's code): reported by a worker (one that runs tasks
    this process doesn't import), else :class:`UnknownTask`. Not "has a row":
    lease() makes rows for names no worker runs, and their requests would be
    pending forever."""
    if not any(name in worker.tasks for worker in WorkQueue().workers()):
        raise UnknownTask(name)
