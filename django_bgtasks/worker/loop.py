"""The worker behind ``manage.py bgtasks worker``: makes due work happen.

Each poll is one read of the lease table (``BackgroundTask.objects.work.due()``,
with the database's clock), after which the worker claims what is due among
its tasks, in this order for each name:

1. **resume**: a resumable task's run that was lost (its holder went silent
   past the ttl) or interrupted (a worker's graceful stop), again with the
   same arguments and ``lease.resume_from``, while attempts remain (a lost
   run of a task that is not resumable but has ``max_attempts > 1`` is
   retried afresh instead);
2. **request**: a pending ``request_run()``;
3. **retry**: a failed run, ``retry_delay`` (doubling) after it ended, while
   attempts remain;
4. **schedule**: the slot the row says is due, moving it to the next one.

Every claim is one compare-and-set statement on the lease row, so any number
of workers on any number of hosts race safely and exactly one wins each piece
of work; the claim gives the run a higher token, which fences off whoever held
it before. A stale lease that nothing is owed for is recorded as ``lost``.

Each run has its own thread, lease, heartbeat and connection. ``stop()`` (the
command calls it on SIGTERM/SIGINT) claims nothing more and sets
``lease.stopping``, so the runs raise :class:`WorkerStopping` at their next
``check()``/``update()`` and are recorded ``interrupted``; the worker waits up
to ``grace`` seconds for them. ``stop_now()`` (on a second signal) waits for
none: it hands the runs still going back as a graceful stop would, each by
its fenced statement, and the process exits. The database going away is
survived: the poll is retried with backoff, and each run's lease follows the
runner's renew deadline.

The worker's own row in the workers' table (``BackgroundTask.objects.work.beat``)
is written every ``WORKER_BEAT_SECONDS``, during the idle wait and the grace
period too, and states the worker's ttl (three beats): readers list a worker
whose last beat is older than that, by the database's clock, as silent. A
killed worker can't remove its row, so every worker's beat removes, at most
once a minute, the rows of workers silent for ``FORGET_WORKERS_AFTER``.

Between polls the worker waits ``poll`` seconds, or less: it watches its
tasks' names on the process's change feed (:mod:`django_bgtasks.push.feed`),
and a change that leaves one of them not running (a release, a cancelled or
failed run ending, a force release, a lease running out, a ``request_run()``
of an idle task) wakes it to poll at once. The poll stays the fallback: slots
are due by time, and a notification lost while the feed reconnects is healed
by the next poll. The Django Tasks queue's threads wait ``poll`` seconds
when nothing is ready, or less on PostgreSQL, where migration 0010's trigger
announces a task becoming ready (an ``enqueue()`` committed, a retry, a
recovery) and the feed wakes every idle queue thread of the worker.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, close_old_connections

from django_bgtasks.background.functions import BackgroundTaskFunction
from django_bgtasks.choices import RESUMABLE_OUTCOMES, Outcome, Trigger
from django_bgtasks.conf import conf
from django_bgtasks.core.leases import default_owner, host_name
from django_bgtasks.core.runner import RunningLease
from django_bgtasks.core.states import DueRow, WorkClaim
from django_bgtasks.db.outages import TRANSIENT_ERRORS, close_connection
from django_bgtasks.limits import MAX_GRACE, MAX_POLL
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.push import feed as changes
from django_bgtasks.queue.manager import READY, RUNNING, Claim
from django_bgtasks.validation import heartbeat_interval

if TYPE_CHECKING:
    from django_bgtasks.queue.execute import QueuedLease

logger = logging.getLogger("django_bgtasks.worker")

# How often a worker renews its own row in the workers' table, whatever its
# --poll (it beats during the idle wait too). Read when a Worker is made.
WORKER_BEAT_SECONDS = 5.0
# The ttl a worker states in its row, in beats: a worker silent for longer is
# listed as silent (as a lease is renewed every ttl/3, so one lost beat is not
# taken for a dead worker). 3 beats of 5 s: limits.WORKER_TTL, the default
# of the row's ttl column.
WORKER_TTL_BEATS = 3
# Live workers (at most every FORGET_EVERY_SECONDS each) and `bgtasks prune`
# remove the rows of workers silent this long (seconds), and past their own
# ttl: they were killed, and could not remove their own. Until then the rows
# stay, listed as silent, so that an operator sees which worker died and when.
FORGET_WORKERS_AFTER = 3600.0
FORGET_EVERY_SECONDS = 60.0
# The longest wait between polls while the database can't be reached.
MAX_BACKOFF_SECONDS = 30.0
# How often a waiting main thread looks whether it should stop waiting: for a
# stop at once while it waits for the runs (a signal handler can only set a
# flag: it can't end a join), and under --once for a run or queue thread that ended.
LOOK_EVERY_SECONDS = 0.1
# A worker stopping at once waits this long, at most, for the statements that
# hand its runs back: one may wait on a row lock the stuck run holds (a
# fence() in an open transaction), and then the process exits anyway.
AT_ONCE_WRITES_SECONDS = 5.0


class Worker:
    """Runs the due work of ``tasks``, at most ``concurrency`` runs at once,
    polling every ``poll`` seconds; see the module docstring."""

    def __init__(
        self,
        tasks: Iterable[BackgroundTaskFunction[..., Any]],
        *,
        concurrency: int = 4,
        poll: float = 1.0,
        grace: float = 30.0,
        queues: Iterable[str] | None = None,
        run_queued: bool = False,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a whole number, 1 or more, not {concurrency!r}")
        if not 0 < poll <= MAX_POLL:
            raise ValueError(
                f"poll must be above 0 and at most {MAX_POLL:g} seconds, not {poll!r}"
            )
        if not 0 <= grace <= MAX_GRACE:
            raise ValueError(f"grace must be from 0 to {MAX_GRACE:g} seconds, not {grace!r}")
        self.tasks = {task.name: task for task in tasks}
        for task in self.tasks.values():
            # Refused now rather than after a claim, which could then not be
            # renewed in time (bgtasks.E002 says so at start-up, unless skipped).
            heartbeat_interval(self._ttl(task))
        self.concurrency, self.poll, self.grace = concurrency, poll, grace
        self.id = default_owner()
        # Set by the change feed's thread, and with ``stopping``: ends the idle wait.
        self._wakeup = threading.Event()
        # One per queue thread: set when a queued task may be ready, and on stopping.
        self._queue_wakeups: list[threading.Event] = []
        self.stopping: threading.Event = _Stopping(self._wake_all)
        self._runs: dict[str, tuple[RunningLease, threading.Thread]] = {}
        self._beat_at = 0.0
        self._beat_running: list[str] | None = None
        self.beat_every = WORKER_BEAT_SECONDS
        self.ttl = WORKER_TTL_BEATS * self.beat_every
        self._forgot_at: float | None = None
        # Django Tasks (django_bgtasks.backend): ``concurrency`` threads of
        # their own, each claiming and running one queued task at a time.
        self.run_queued = run_queued or queues is not None
        self.queues = None if queues is None else sorted(set(queues))
        self._queue_threads: list[threading.Thread] = []
        # The seq of each queued task a queue thread holds here, how many
        # claims are on their way (sent, their reply not yet recorded in
        # ``_held_queued``), and the condition both are guarded by: a
        # give-back (after a claim whose reply was lost) waits until no claim
        # is on its way, so that it never takes a task another thread has
        # just claimed, and no claim starts while it runs. Claims themselves
        # don't wait on each other.
        self._held_queued: set[int] = set()
        self._claims_on_their_way = 0
        self._claiming = threading.Condition()
        self._once = False
        # stop_now() was called: a plain flag, since a signal handler sets it.
        self._at_once = False
        self.stopped_at_once = False

    # --- the loop ------------------------------------------------------------

    def run(self, *, once: bool = False) -> None:
        """Work until :meth:`stop`; with ``once``, until nothing is due or running."""
        logger.info(
            "worker %s: %d task(s) (%s), concurrency %d, poll %g s",
            self.id,
            len(self.tasks),
            ", ".join(self.tasks) or "none",
            self.concurrency,
            self.poll,
        )
        backoff = self.poll
        self._once = once
        if self.run_queued:
            self._start_queue_threads()
        watcher = self._watch()
        queue_watcher = (
            changes.watch_queue(self.queues, wake=self._wake_queue, using=conf.DATABASE)
            if self.run_queued and not once
            else None
        )
        try:
            while not self.stopping.is_set():
                self._wakeup.clear()
                if watcher is not None:
                    watcher.take()  # this tick reads them all afresh
                close_old_connections()
                try:
                    started = self.tick()
                except TRANSIENT_ERRORS as exc:
                    logger.warning("database unreachable, retrying in %g s: %s", backoff, exc)
                    close_connection()
                    self.stopping.wait(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                    continue
                backoff = self.poll
                queue_busy = any(thread.is_alive() for thread in self._queue_threads)
                if once and not started and not self._runs and not queue_busy:
                    break
                self._idle(watcher, queue_busy)
        finally:
            if watcher is not None:
                watcher.close()
            if queue_watcher is not None:
                queue_watcher.close()
            self._shut_down()

    def stop(self) -> None:
        """Begin a graceful stop: claim nothing more, and tell the runs to stop."""
        if not self.stopping.is_set():
            logger.info("worker %s: stopping (grace %g s)", self.id, self.grace)
        self.stopping.set()

    def stop_now(self) -> None:
        """Stop at once (the command calls it on a second SIGTERM/SIGINT): wait
        for no run; the runs still going are handed back as a graceful stop
        would hand them back, and :meth:`run` returns with
        ``stopped_at_once`` set. Safe in a signal handler: it takes no lock
        unless the worker was not stopping yet."""
        self._at_once = True
        if not self.stopping.is_set():
            self.stopping.set()

    def _watch(self) -> changes.Watcher | None:
        """A watcher of this worker's task names on the process's change feed
        (none for a worker of the queue alone). Watching starts the feed's
        thread and runs no SQL here, so it cannot fail on a missing database:
        the feed connects, and reconnects, by itself."""
        if not self.tasks:
            return None
        return changes.watch(list(self.tasks), wake=self._wakeup.set, using=conf.DATABASE)

    def _idle(self, watcher: changes.Watcher | None, queue_busy: bool = False) -> None:
        """Wait ``poll`` seconds, or until :meth:`stop`, or until the feed
        reports a change that may have made work due (:func:`wakes_a_worker`).
        Other changes (the progress of a run, ours or another's) only make it
        look again and wait out the rest of the poll. With ``once``, also
        until a run ends, or the queue threads (``queue_busy`` at the poll) do."""
        deadline = time.monotonic() + spread(self.poll)
        while not self.stopping.is_set():
            # --once exits as soon as its work is done, not a poll later.
            if self._once and self._work_ended(queue_busy):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            # Wake for the first of: the poll's end; the next beat (a poll
            # longer than a beat must not make a live worker look silent);
            # under --once, the next look at whether the work ended.
            wait = min(left, LOOK_EVERY_SECONDS) if self._once else left
            next_beat = self._beat_at + self.beat_every - time.monotonic()
            if next_beat < wait:
                if not self._wakeup.wait(max(next_beat, 0.0)):
                    self._beat_quietly()
                    continue
            elif not self._wakeup.wait(wait):
                continue
            # Cleared before taking: a change pushed after the take sets it again.
            self._wakeup.clear()
            if watcher is not None and any(map(wakes_a_worker, watcher.take())):
                return

    def _work_ended(self, queue_busy: bool) -> bool:
        """A run of ours ended, or the queue threads, busy at the last poll, all did."""
        if any(not thread.is_alive() for _, thread in self._runs.values()):
            return True
        return queue_busy and not any(thread.is_alive() for thread in self._queue_threads)

    def tick(self) -> int:
        """One poll: claim and start what is due. Returns how many runs started."""
        self._reap_runs()
        self._beat()
        if self.run_queued:
            self._recover_queued()
        rows = BackgroundTask.objects.work.due()
        self._ensure_schedules(rows)
        started = 0
        for row in rows:
            task = self.tasks.get(row.name)
            if task is None or self.stopping.is_set():
                continue
            if self._step(task, row):
                started += 1
        if started:
            self._beat(force=True)
        return started

    # --- one name ------------------------------------------------------------

    def _step(self, task: BackgroundTaskFunction[..., Any], row: DueRow) -> bool:
        """Do what ``row`` says is due for ``task``; ``True`` if a run started."""
        work = BackgroundTask.objects.work
        if row.running or row.name in self._runs:
            # Held by a live holder (maybe us): a slot that comes meanwhile is
            # skipped. (A run of ours that went stale is left to another worker.)
            schedule = task.effective_schedule
            if row.running and row.slot_due and row.next_run_at and schedule is not None:
                work.skip_slot(
                    row.name,
                    due=row.next_run_at,
                    next_slot=schedule.next_after(row.db_now),
                    schedule=schedule.text,
                )
            return False
        if len(self._runs) >= self.concurrency:
            return False
        if row.token > 0 and owes_again(task, row):
            trigger = Trigger.RESUME if task.resume else Trigger.RETRY
            return self._start(task, trigger, self._claim_again, task, row)
        if row.requested:
            return self._start(
                task, Trigger.REQUEST, work.claim_request, row.name, self.id, self._ttl(task)
            )
        if retry_due(task, row):
            return self._start(task, Trigger.RETRY, self._claim_retry, task, row)
        if row.slot_due and row.next_run_at and task.effective_schedule is not None:
            return self._start(task, Trigger.SCHEDULE, self._claim_scheduled, task, row)
        if row.stale:
            self._record_lost(task, row)
        return False

    def _claim_again(self, task: BackgroundTaskFunction[..., Any], row: DueRow) -> Any:
        return BackgroundTask.objects.work.claim_resume(
            row.name,
            self.id,
            self._ttl(task),
            expect=row.token,
            max_attempts=task.max_attempts,
            resume=task.resume,
        )

    def _claim_retry(self, task: BackgroundTaskFunction[..., Any], row: DueRow) -> Any:
        return BackgroundTask.objects.work.claim_retry(
            row.name,
            self.id,
            self._ttl(task),
            expect=row.token,
            max_attempts=task.max_attempts,
            delay=task.retry_delay_for(row.attempt),
            resume=task.resume,
        )

    def _claim_scheduled(self, task: BackgroundTaskFunction[..., Any], row: DueRow) -> Any:
        schedule = task.effective_schedule
        assert row.next_run_at is not None and schedule is not None
        return BackgroundTask.objects.work.claim_scheduled(
            row.name,
            self.id,
            self._ttl(task),
            due=row.next_run_at,
            next_slot=schedule.next_after(row.db_now),
            schedule=schedule.text,
        )

    def _record_lost(self, task: BackgroundTaskFunction[..., Any], row: DueRow) -> None:
        """A silent holder, and nothing owed for it: record the run as lost now."""
        if task.resume or task.max_attempts > 1:
            error = (
                f"lost on attempt {row.attempt} of {task.max_attempts}; not resumed again "
                "(max_attempts)"
            )
        else:
            error = "lease expired: no heartbeat within the ttl"
        if BackgroundTask.objects.expire_stale(row.name, token=row.token, error=error):
            logger.warning(
                "task %r (token %d) lost: %s",
                row.name,
                row.token,
                error,
                extra={"task": row.name, "token": row.token},
            )

    def _start(
        self, task: BackgroundTaskFunction[..., Any], trigger: Trigger, claim: Any, *args: Any
    ) -> bool:
        claimed_at = time.monotonic()
        work: WorkClaim | None = claim(*args)
        if work is None:
            return False  # another worker won it
        running = RunningLease.from_work(
            work, trigger=trigger, claimed_at=claimed_at, stopping=self.stopping
        )
        logger.info(
            "task %r started (token %d, %s, attempt %d)",
            task.name,
            running.token,
            trigger,
            running.attempt,
        )
        thread = task.run_in_thread(running, work.args, work.kwargs)
        self._runs[task.name] = (running, thread)
        return True

    # --- Django Tasks -----------------------------------------------------------

    def _start_queue_threads(self) -> None:
        self._queue_wakeups = [threading.Event() for _ in range(self.concurrency)]
        if self.stopping.is_set():
            self._wake_all()
        for number, wakeup in enumerate(self._queue_wakeups):
            thread = threading.Thread(
                target=self._queue_loop,
                args=(wakeup,),
                name=f"bgtasks-queue-{number}",
                daemon=True,
            )
            thread.start()
            self._queue_threads.append(thread)

    def _wake_all(self) -> None:
        self._wakeup.set()
        self._wake_queue()

    def _wake_queue(self) -> None:
        for wakeup in self._queue_wakeups:
            wakeup.set()

    def _queue_loop(self, wakeup: threading.Event) -> None:
        """Claim a ready task, run it, repeat; when there is none, wait ``poll``
        seconds or until ``wakeup`` (a task became ready, on PostgreSQL; a
        stop). With ``once``, stop then."""
        # Imported here: it needs Django's Tasks framework (django.tasks or the
        # backport), which a worker of background tasks alone may not have.
        from django_bgtasks.queue.execute import execute

        backoff = self.poll
        # A claim failed with the connection: it may have committed, its
        # reply lost. Until a give-back has run, that task may be ours.
        unsure = False
        try:
            while not self.stopping.is_set():
                # Cleared before the claim: a task ready after it sets it again.
                wakeup.clear()
                try:
                    claim = self._claim_queued(give_back=unsure)
                    unsure = False
                except TRANSIENT_ERRORS as exc:
                    unsure = True
                    logger.warning(
                        "queue: database unreachable, retrying in %g s: %s", backoff, exc
                    )
                    close_connection()
                    self.stopping.wait(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                    continue
                backoff = self.poll
                if claim is None:
                    if self._once:
                        return
                    # (A stop that came before the clear above: seen here.)
                    if not self.stopping.is_set():
                        wakeup.wait(spread(self.poll))
                    continue
                logger.info(
                    "queued task %s %s started (token %d, attempt %d)",
                    claim.task_path,
                    claim.uuid,
                    claim.token,
                    claim.attempts,
                )
                try:
                    status = execute(claim, stopping=self.stopping)
                except TRANSIENT_ERRORS as exc:
                    # Its end could not be written before the lease's
                    # deadline: the row is recovered after its ttl.
                    logger.warning("queued task %s: database unreachable: %s", claim.uuid, exc)
                    close_connection()
                    self.stopping.wait(backoff)
                    continue
                except BaseException:
                    # execute() records whatever the task raised; anything
                    # else (a signal receiver's KeyboardInterrupt, say) must
                    # not end this thread either: with --concurrency 1 no
                    # task would run again. Signals never arrive here (they
                    # reach the main thread), so nothing is swallowed that
                    # meant "stop": that is ``stopping``.
                    logger.exception("queued task %s: the worker failed to run it", claim.uuid)
                    continue
                finally:
                    with self._claiming:
                        self._held_queued.discard(claim.seq)
                logger.info(
                    "queued task %s %s (token %d, attempt %d) ended: %s",
                    claim.task_path,
                    claim.uuid,
                    claim.token,
                    claim.attempts,
                    _ended(status),
                )
        finally:
            if unsure:  # stopping before the database came back: one last try
                with contextlib.suppress(DatabaseError), self._claiming:
                    self._claiming.wait_for(lambda: self._claims_on_their_way == 0)
                    self._give_back_unheld()
            close_connection()

    def _claim_queued(self, *, give_back: bool) -> Claim | None:
        """Claim a queued task, and record it as held here. With
        ``give_back`` (a claim before failed with the connection), first
        :meth:`_give_back_unheld`."""
        with self._claiming:
            if give_back:
                # (Waits for the other threads' claims on their way, which end
                # with their reply or their error; the lock stays held while
                # the statement runs, so no claim starts meanwhile.)
                self._claiming.wait_for(lambda: self._claims_on_their_way == 0)
                self._give_back_unheld()
            self._claims_on_their_way += 1
        claimed = None
        try:
            claimed = QueuedTask.objects.claim(self.id, queues=self.queues)
        finally:
            with self._claiming:
                self._claims_on_their_way -= 1
                if claimed is not None:
                    self._held_queued.add(claimed.seq)
                self._claiming.notify_all()
        return claimed

    def _give_back_unheld(self) -> None:
        """Put back in the queue every task this worker claimed and holds in no
        thread: a claim that committed, its reply lost with the connection.
        Without this, it would wait out its ttl as ``RUNNING``, then count
        as a lost attempt. Called with ``_claiming`` held, and no claim on its way."""
        for result_id in QueuedTask.objects.give_back(self.id, held=self._held_queued):
            logger.warning(
                "queued task %s: the reply to its claim was lost; back in the queue", result_id
            )

    def _recover_queued(self) -> None:
        """Queued tasks whose worker went silent past their ttl: ready again
        while attempts remain, else failed ("worker lost")."""
        for result_id, status in QueuedTask.objects.recover():
            logger.warning("queued task %s: its worker was lost; now %s", result_id, status)

    # --- schedules -------------------------------------------------------------

    def _ensure_schedules(self, rows: list[DueRow]) -> None:
        """Give each scheduled task its first slot, and follow schedule changes:
        a changed schedule moves the slot earlier only (or removes it), so
        workers that disagree for a while (a rolling deploy) never keep
        postponing it. The statement repeats the rule, for races."""
        by_name = {row.name: row for row in rows}
        now: dt.datetime | None = rows[0].db_now if rows else None
        for task in self.tasks.values():
            row, schedule = by_name.get(task.name), task.effective_schedule
            text = schedule.text if schedule is not None else ""
            if row is not None and row.schedule == text and row.next_run_at is not None:
                continue
            if schedule is None and (row is None or not row.schedule):
                continue
            if now is None:
                now = BackgroundTask.objects.work.clock()
            next_slot = schedule.next_after(now) if schedule is not None else None
            if _comes_first(row, next_slot):
                continue  # the slot another schedule set comes first: keep it
            BackgroundTask.objects.work.ensure_schedule(
                task.name, schedule=text, next_slot=next_slot, ttl=self._ttl(task)
            )

    @staticmethod
    def _ttl(task: BackgroundTaskFunction[..., Any]) -> float:
        return conf.TTL if task.ttl is None else task.ttl

    # --- bookkeeping -----------------------------------------------------------

    def _reap_runs(self) -> None:
        """Forget this worker's own runs whose threads ended. (Other workers'
        rows are removed by :meth:`_forget_silent_workers`.)"""
        for name, (running, thread) in list(self._runs.items()):
            if not thread.is_alive():
                del self._runs[name]
                logger.info(
                    "task %r (token %d, attempt %d) ended: %s",
                    name,
                    running.token,
                    running.attempt,
                    running.outcome or "lost",
                )

    def _beat(self, *, force: bool = False) -> None:
        running = sorted(self._runs)
        now = time.monotonic()
        if (
            not force
            and running == self._beat_running
            and now - self._beat_at < WORKER_BEAT_SECONDS
        ):
            return
        BackgroundTask.objects.work.beat(
            worker=self.id,
            host=host_name(),
            pid=os.getpid(),
            tasks=sorted(self.tasks),
            concurrency=self.concurrency,
            running=running,
            ttl=self.ttl,
        )
        self._beat_at, self._beat_running = now, running
        self._forget_silent_workers()

    def _beat_quietly(self) -> None:
        """A beat between polls (the idle wait, the grace period): a database
        that can't be reached now is the next poll's to report and retry."""
        try:
            self._beat()
        except TRANSIENT_ERRORS as exc:
            logger.debug("worker %s: heartbeat failed: %s", self.id, exc)
            close_connection()
            self._beat_at = time.monotonic()  # the next try a beat later, not at once

    def _forget_silent_workers(self) -> None:
        """Remove the rows of workers silent for FORGET_WORKERS_AFTER (and past
        their own ttl, by the database's clock), at most every
        FORGET_EVERY_SECONDS: killed workers can't remove their own, and
        without this nothing would unless someone ran ``bgtasks prune``."""
        now = time.monotonic()
        if self._forgot_at is not None and now - self._forgot_at < FORGET_EVERY_SECONDS:
            return
        self._forgot_at = now
        forgot = BackgroundTask.objects.work.forget_workers(FORGET_WORKERS_AFTER)
        if forgot:
            logger.info(
                "worker %s: forgot %d worker(s) silent for more than %g s",
                self.id,
                forgot,
                FORGET_WORKERS_AFTER,
            )

    def _shut_down(self) -> None:
        self.stopping.set()
        if self._runs:
            logger.info(
                "worker %s: stopping; waiting up to %g s for %s",
                self.id,
                self.grace,
                ", ".join(self._runs),
            )
        deadline = time.monotonic() + self.grace
        for name, (running, thread) in list(self._runs.items()):
            self._join(thread, deadline)
            if thread.is_alive() and not self._at_once:
                logger.warning(
                    "task %r (token %d) did not stop within the grace period (%g s); its "
                    "lease expires after its ttl and another worker takes it over",
                    name,
                    running.token,
                    self.grace,
                )
        for thread in self._queue_threads:
            self._join(thread, deadline)
            if thread.is_alive() and not self._at_once:
                logger.warning(
                    "a queued task did not stop within the grace period (%g s); its lease "
                    "expires after its ttl and a worker retries or fails it",
                    self.grace,
                )
        if self._at_once:
            self.stopped_at_once = True
            self._hand_back()
        self._reap_runs()
        with contextlib.suppress(DatabaseError):
            BackgroundTask.objects.work.gone(self.id)
        close_connection()
        logger.info("worker %s: stopped", self.id)

    def _join(self, thread: threading.Thread, deadline: float) -> None:
        """Wait for ``thread`` until ``deadline``, or until :meth:`stop_now`,
        beating meanwhile: a worker waiting out its grace period is alive,
        and its row must say so."""
        while thread.is_alive() and not self._at_once:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            thread.join(min(left, LOOK_EVERY_SECONDS))
            if thread.is_alive() and time.monotonic() >= self._beat_at + self.beat_every:
                self._beat_quietly()

    def _hand_back(self) -> None:
        """Stopping at once: record the runs still going as a graceful stop
        does (``interrupted``; a queued task ``READY`` again, its attempt given
        back), each by its fenced statement, on a thread of its own that is
        waited for ``AT_ONCE_WRITES_SECONDS`` at most. The runs' threads die
        with the process; a run whose statement did not finish in time goes
        stale after its ttl, as after a SIGKILL."""
        runs = [running for running, thread in self._runs.values() if thread.is_alive()]
        queued: list[QueuedLease] = []
        if self.run_queued:
            from django_bgtasks.queue.execute import running_leases

            queued = running_leases(self.id)
        logger.warning(
            "worker %s: stopping at once; handing back %d run(s) still going",
            self.id,
            len(runs) + len(queued),
        )
        writer = threading.Thread(
            target=_hand_back, args=(runs, queued), name="bgtasks-stop-at-once", daemon=True
        )
        writer.start()
        writer.join(AT_ONCE_WRITES_SECONDS)
        if writer.is_alive():
            logger.warning(
                "worker %s: the runs were not all handed back within %g s; the rest expire "
                "after their ttl",
                self.id,
                AT_ONCE_WRITES_SECONDS,
            )


def _hand_back(runs: list[RunningLease], queued: list[QueuedLease]) -> None:
    """The writes of :meth:`Worker._hand_back`, on their own thread."""
    try:
        for running in runs:
            try:
                if running.interrupt():
                    logger.info(
                        "task %r (token %d, attempt %d) ended: %s",
                        running.name,
                        running.token,
                        running.attempt,
                        running.outcome,
                    )
            except DatabaseError as exc:
                logger.warning("task %r: not handed back: %s", running.name, exc)
        for lease in queued:
            try:
                status = lease.interrupt()
            except DatabaseError as exc:
                logger.warning("queued task %s: not handed back: %s", lease.name, exc)
            else:
                logger.info(
                    "queued task %s (token %d, attempt %d) ended: %s",
                    lease.name,
                    lease.token,
                    lease.attempt,
                    _ended(status),
                )
    finally:
        close_connection()


class _Stopping(threading.Event):
    """The worker's stop flag, which also ends its idle waits: whoever sets it
    (``stop()``, the command's signal handler, a test) wakes the loop and the
    queue threads at once."""

    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake()


def spread(poll: float) -> float:
    """The wait before the next poll: a random point in the second half of
    ``poll``. Workers woken by the same change (a release announced to all)
    would otherwise poll in step from then on, and the fastest of them would
    claim every slot that comes due; spread out, each slot goes to whichever
    worker happens to look first. ``poll`` stays the longest wait."""
    return poll * random.uniform(0.5, 1.0)  # noqa: S311  (not for secrets)


def owes_again(task: BackgroundTaskFunction[..., Any], row: DueRow) -> bool:
    """A lost run is owed another attempt while attempts remain (resumed from
    its checkpoint for a resumable task, else retried afresh); an interrupted
    one, of a resumable task, always (a graceful stop uses no attempt)."""
    if row.stale:
        return row.attempt < task.max_attempts
    if row.outcome == Outcome.INTERRUPTED:
        return task.resume
    return row.outcome in RESUMABLE_OUTCOMES and row.attempt < task.max_attempts


def wakes_a_worker(change: changes.Change) -> bool:
    """Whether a change may have made work due for the task: it is not
    running any more (released, ended, force-released, stale: a resume, retry
    or pending request can start), it is idle with a new request, or its row
    went away. A running task's progress or cancel request starts nothing."""
    return change.state is None or not change.state.running


def retry_due(task: BackgroundTaskFunction[..., Any], row: DueRow) -> bool:
    """A failed run, attempts left, and its (doubling) delay passed by the
    database's clock; never a run that failed only because its return value
    could not be stored (its work is done)."""
    return (
        not row.stale
        and row.outcome == Outcome.FAILED
        and not row.result_not_stored
        and row.attempt < task.max_attempts
        and row.finished_age is not None
        and row.finished_age >= task.retry_delay_for(row.attempt)
    )


def _comes_first(row: DueRow | None, next_slot: dt.datetime | None) -> bool:
    """The row's slot is no later than ``next_slot``, so a changed schedule keeps it."""
    if row is None or row.next_run_at is None or next_slot is None:
        return False
    return row.next_run_at <= next_slot


def _ended(status: str) -> str:
    """How a queued task's run ended, from the status it left the row in."""
    if status == READY:
        return f"{READY} (to be run again)"
    if status == RUNNING:
        return "its lease was lost (the recovery ends it)"
    return status
