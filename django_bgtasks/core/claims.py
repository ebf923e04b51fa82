"""The workers' lease operations: ``BackgroundTask.objects.work``.

Each is one statement from :mod:`django_bgtasks.db`, run by
:mod:`django_bgtasks.core.store` in autocommit, like the lease operations of
:mod:`django_bgtasks.core.leases`: the poll that finds due
work (a read, so an idle worker writes nothing), the claims that start a
requested, scheduled, resumed or retried run, the workers' own heartbeat
rows, and a worker's one renewal of every lease it holds (``renew_many``).
Every claim is a compare-and-set decided by the database's clock, so any
number of workers on any number of hosts can race for the same work and
exactly one wins.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import replace

from django_bgtasks.choices import Outcome, Trigger
from django_bgtasks.core import store
from django_bgtasks.core.states import (
    DueRow,
    Lease,
    TaskState,
    WorkClaim,
    WorkerState,
    as_datetime,
)
from django_bgtasks.db import params as params_of
from django_bgtasks.db.shared import renew_many_param
from django_bgtasks.limits import WORKER_TTL
from django_bgtasks.validation import (
    encode_value,
    validate_name,
    validate_owner,
    validate_token,
    validate_ttl,
)


class WorkQueue:
    """The statements a ``bgtasks worker`` runs; see the module docstring."""

    # --- the poll ------------------------------------------------------------

    def due(self) -> list[DueRow]:
        """Every lease row, as the workers' poll needs it, with the database's clock."""
        return [DueRow.from_row(row) for row in store.read(params_of.DueWork())]

    def clock(self) -> dt.datetime:
        """The database's clock now (for a first schedule slot, when no row exists)."""
        now = as_datetime(store.read(params_of.Clock())[0]["db_now"])
        assert now is not None
        return now

    # --- claims: each returns the claim, or None when another worker won -----

    def claim_request(self, name: str, owner: str, ttl: float) -> WorkClaim | None:
        """Claim ``name`` to perform its pending request (and take the request)."""
        name, owner, ttl = _claimer(name, owner, ttl)
        return self._claim(params_of.ClaimRequest(name, owner, ttl, Trigger.REQUEST.value))

    def claim_scheduled(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        due: dt.datetime,
        next_slot: dt.datetime,
        schedule: str,
    ) -> WorkClaim | None:
        """Claim ``name`` for the slot ``due`` (as the poll read it), moving the
        row on to ``next_slot`` of ``schedule``; only while the database's clock
        is before it."""
        name, owner, ttl = _claimer(name, owner, ttl)
        params = params_of.ClaimScheduled(
            name, owner, ttl, Trigger.SCHEDULE.value, due=due, next=next_slot, schedule=schedule
        )
        return self._claim(params)

    # Alike claim_retry() on purpose: each claim is its own compare-and-set
    # statement, with the arguments that statement needs.
    def claim_resume(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        expect: int,
        max_attempts: int,
        resume: bool = True,
    ) -> WorkClaim | None:
        """Claim again the lost or interrupted run ``expect`` of ``name``: with
        ``resume``, keeping its last value for ``resume_from``; else afresh, as
        a retry (a task that is not resumable but has attempts left)."""
        name, owner, ttl = _claimer(name, owner, ttl)
        trigger = Trigger.RESUME if resume else Trigger.RETRY
        params = params_of.ClaimResume(
            name,
            owner,
            ttl,
            trigger.value,
            expect=validate_token(expect),
            max_attempts=max_attempts,
            interrupted=Outcome.INTERRUPTED.value,
            lost=Outcome.LOST.value,
            resume=resume,
        )
        return self._claim(params)

    def claim_retry(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        expect: int,
        max_attempts: int,
        delay: float,
        resume: bool,
    ) -> WorkClaim | None:
        """Claim again the failed (or timed-out) run ``expect`` of ``name``, ``delay`` seconds
        after it ended; ``resume`` keeps its last value for ``resume_from``."""
        name, owner, ttl = _claimer(name, owner, ttl)
        params = params_of.ClaimRetry(
            name,
            owner,
            ttl,
            Trigger.RETRY.value,
            expect=validate_token(expect),
            max_attempts=max_attempts,
            failed=Outcome.FAILED.value,
            timed_out=Outcome.TIMED_OUT.value,
            delay=float(delay),
            resume=resume,
        )
        return self._claim(params)

    def _claim(
        self,
        params: params_of.ClaimRequest
        | params_of.ClaimScheduled
        | params_of.ClaimResume
        | params_of.ClaimRetry,
    ) -> WorkClaim | None:
        """Run one of the claims, whose name, owner and ttl ``_claimer`` checked."""
        name, owner, ttl = params.name, params.owner, params.ttl
        sent = time.monotonic()
        rows = store.write(params.STATEMENT, params)
        if not rows:
            return None
        claim = WorkClaim.from_row(lambda token: Lease(name, owner, token, ttl, sent), rows[0])
        # The row keeps the latest request's trace context: a request's run continues it.
        return claim if params.trigger == Trigger.REQUEST else replace(claim, trace_context=None)

    # --- schedules -------------------------------------------------------------

    def skip_slot(
        self, name: str, *, due: dt.datetime, next_slot: dt.datetime, schedule: str
    ) -> bool:
        """The slot ``due`` came while ``name`` still runs, or while it is
        paused: move on to ``next_slot`` of ``schedule`` and count the skip on
        the running run, or for a paused task that nobody runs, on the row,
        for its next run's ``skipped``."""
        params = params_of.SkipSlot(validate_name(name), due, next_slot, schedule)
        return bool(store.write("skip_slot", params))

    def take_slot(
        self, name: str, *, due: dt.datetime, next_slot: dt.datetime, schedule: str
    ) -> bool:
        """Take the slot ``due`` of the schedule row ``name`` (a Django Task
        schedule's, which nobody holds), moving it on to ``next_slot`` of
        ``schedule``, only while the database's clock is before that: whether
        this call took it. Runs in the caller's transaction, in which the
        caller enqueues the slot's task (:mod:`django_bgtasks.queue.task_schedules`)."""
        params = params_of.TakeSlot(validate_name(name), due, next_slot, schedule)
        return bool(store.write_in_transaction(params))

    def ensure_schedule(
        self, name: str, *, schedule: str, next_slot: dt.datetime | None, ttl: float
    ) -> bool:
        """Give ``name`` its row and first slot; when its schedule changed, move
        the slot earlier only (``schedule=""`` and ``next_slot=None`` remove it)."""
        params = params_of.EnsureSchedule(
            validate_name(name), schedule, next_slot, validate_ttl(ttl)
        )
        return bool(store.write("ensure_schedule", params))

    # --- the workers' own rows -------------------------------------------------

    def beat(
        self,
        *,
        worker: str,
        host: str,
        pid: int,
        tasks: list[str],
        concurrency: int,
        running: list[str],
        ttl: float = WORKER_TTL,
    ) -> None:
        """Record that worker ``worker`` is alive, and what it runs now; ``ttl``
        is how long after this beat it counts as silent if no other comes."""
        params = params_of.WorkerBeat(
            id=worker,
            host=host,
            pid=pid,
            tasks=encode_value(tasks),
            concurrency=concurrency,
            running=encode_value(running),
            ttl=validate_ttl(ttl),
        )
        store.write("worker_beat", params)

    def renew_many(
        self, tasks: list[tuple[str, str, int]], queued: list[tuple[int, str, int]]
    ) -> dict[tuple[str, str, int], tuple[bool, float]]:
        """Renew, in one statement, every lease a worker holds: ``tasks``
        (name, owner, token) in the lease table and ``queued`` (seq, owner,
        token) Django Tasks, each as its own heartbeat would. Returns, for
        each lease still held, ``(kind, key, token)`` (``db.rules``' RENEW_TASK
        or RENEW_QUEUED, the name or the seq as text) -> its
        ``(cancel_requested, age)``, ``age`` the seconds since its run began
        by the database's clock; a lease missing from it is no longer held."""
        rows = store.write("heartbeat", params_of.RenewMany(renew_many_param(tasks, queued)))
        return {
            (str(row["kind"]), str(row["key"]), int(row["token"])): (
                bool(row["cancel_requested"]),
                float(row["age"] or 0.0),
            )
            for row in rows
        }

    def gone(self, worker: str) -> None:
        """Remove worker ``worker``'s row: it stopped cleanly."""
        store.write("worker_gone", params_of.WorkerGone(worker))

    def lost(self, worker: str, result_ids: Sequence[str]) -> bool:
        """Add to worker ``worker``'s row the ids of the Django Tasks the
        queue's recovery took back from it (``result_ids``), for the
        operator's view of a lost worker. Whether the row is still there."""
        params = params_of.WorkerLost(worker, encode_value(list(result_ids)))
        return bool(store.write("worker_lost", params))

    def forget_workers(self, silent_for: float) -> int:
        """Remove the rows of workers silent for more than ``silent_for``
        seconds, and past their own ttl (killed ones, which could not remove
        their own), by the database's clock. How many."""
        params = params_of.ForgetWorkers(float(silent_for))
        return len(store.write("forget_workers", params))

    def workers(self) -> list[WorkerState]:
        """Every worker's last report, with its age and whether it is silent by
        the database's clock; a silent worker's runs as their lease rows say
        (:meth:`WorkerState.with_runs`)."""
        workers = [WorkerState.from_row(row) for row in store.read(params_of.ListWorkers())]
        if not any(worker.silent and worker.running for worker in workers):
            return [worker.with_runs({}) for worker in workers]
        rows = store.read(params_of.ListStates())
        states = {state.name: state for state in map(TaskState.from_row, rows)}
        return [worker.with_runs(states) for worker in workers]


def _claimer(name: str, owner: str, ttl: float) -> tuple[str, str, float]:
    """A claim's name, owner and ttl, checked."""
    return validate_name(name), validate_owner(owner), validate_ttl(ttl)
