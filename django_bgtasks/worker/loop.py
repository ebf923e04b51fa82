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

A paused task (``bgtasks pause NAME``) is claimed for none of these: a due
slot is skipped and counted, the rest waits for the unpause.

A worker that runs Django Tasks also keeps their schedules (``TASKS``'
``SCHEDULES``, :mod:`django_bgtasks.queue.task_schedules`): each poll, a due slot
is taken and its task enqueued, in one transaction.

Every claim is one compare-and-set statement on the lease row, so any number
of workers on any number of hosts race safely and exactly one wins each piece
of work; the claim gives the run a higher token, which fences off whoever held
it before. A stale lease that nothing is owed for is recorded as ``lost``.

Each run has its own thread, lease and connection; one renewer renews every
lease the worker holds, its runs' and its Django Tasks', in one statement a
beat (:mod:`django_bgtasks.worker.renewal`). ``stop()`` (the
command calls it on SIGTERM/SIGINT) claims nothing more and sets
``lease.stopping``, so the runs raise :class:`WorkerStopping` at their next
``check()``/``update()`` and are recorded ``interrupted``; the worker waits up
to ``grace`` seconds for them. ``stop_now()`` (on a second signal) waits for
none: it hands the runs still going back as a graceful stop would, each by
its fenced statement, and the process exits. The database going away is
survived: the poll is retried with backoff, and each run's lease follows the
runner's renew deadline.

The worker's jobs beside this loop each have a module of their own in
``django_bgtasks/worker/``: ``schedules`` (each scheduled task's slot),
``rescue`` (resume, retry, record lost), ``queue_threads`` (the Django Tasks
threads), ``rollup`` (the dashboard's counts, which the workers of the queue
keep), ``heartbeat`` (its own row in the workers' table, which says it
is alive), ``stopping`` (the stop flag and the hand-back of a stop at once)
and ``polls`` (how long it waits).

Between polls the worker waits ``poll`` seconds, or less: it watches its
tasks' names on the process's change feed (:mod:`django_bgtasks.push.feed`),
and a change that leaves one of them not running (a release, a cancelled or
failed run ending, a force release, a lease running out, a ``request_run()``
of an idle task) wakes it to poll at once. The poll stays the fallback: slots
are due by time, and a notification lost while the feed reconnects is healed
by the next poll. The Django Tasks queue's threads wait ``poll`` seconds
when nothing is ready, or less on PostgreSQL, where migration 0010's trigger
announces a task becoming ready (an ``enqueue()`` committed, a retry, a
recovery) and the feed wakes one idle queue thread of the worker
(worker/idle.py).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django_bgtasks.background.functions import BackgroundTaskFunction
from django_bgtasks.choices import Trigger
from django_bgtasks.conf import conf
from django_bgtasks.core.leases import default_owner
from django_bgtasks.core.runner import RunningLease
from django_bgtasks.core.states import DueRow, WorkClaim
from django_bgtasks.db.outages import TRANSIENT_ERRORS, close_broken_connections, close_connection
from django_bgtasks.limits import MAX_GRACE, MAX_POLL
from django_bgtasks.models import BackgroundTask
from django_bgtasks.push import feed as changes
from django_bgtasks.queue.task_schedules import task_schedules
from django_bgtasks.validation import heartbeat_interval, validate_queue_names
from django_bgtasks.worker import rescue, slots
from django_bgtasks.worker.heartbeat import Heartbeat
from django_bgtasks.worker.hooks import WorkerHooks
from django_bgtasks.worker.polls import back_off, spread
from django_bgtasks.worker.queue_threads import QueueThreads, Recovery
from django_bgtasks.worker.renewal import Renewer
from django_bgtasks.worker.rollup_keeper import RollupKeeper
from django_bgtasks.worker.runs import LOOK_EVERY_SECONDS, Runs, join, log_started
from django_bgtasks.worker.stopping import Stopping, hand_back

if TYPE_CHECKING:
    from django_bgtasks.queue.execute import QueuedLease

logger = logging.getLogger("django_bgtasks.worker")


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
        hooks: WorkerHooks | None = None,
    ) -> None:
        check_bounds(concurrency, poll, grace)
        self.tasks = {task.name: task for task in tasks}
        for task in self.tasks.values():
            # Refused now rather than after a claim, which could then not be
            # renewed in time (bgtasks.E002 says so at start-up, unless skipped).
            heartbeat_interval(task.effective_ttl)
        self.concurrency, self.poll, self.grace = concurrency, poll, grace
        self.id = default_owner()
        # Set by the change feed's thread, and with ``stopping``: ends the idle wait.
        self._wakeup = threading.Event()
        self.stopping: threading.Event = Stopping(self._wake_all)
        # Told of each run's end, each Django Task's start and end, each
        # renewal (worker/hooks.py): its metrics with --metrics-port.
        self.hooks = hooks
        self._runs = Runs(hooks)
        self.heartbeat = Heartbeat(self.id, list(self.tasks), concurrency)
        self.ttl = self.heartbeat.ttl
        # One statement a beat renews them all.
        self.renewer = Renewer(timeout_grace=grace, hooks=hooks)
        # Django Tasks (django_bgtasks.backend): ``concurrency`` threads, a task each.
        self.run_queued = run_queued or queues is not None
        self.queues = None if queues is None else sorted(set(validate_queue_names(list(queues))))
        self.queue_threads = QueueThreads(
            self.id,
            count=concurrency,
            poll=poll,
            queues=self.queues,
            stopping=self.stopping,
            hooks=hooks,
        )
        self.recovery = Recovery()
        self.rollup = RollupKeeper()
        # The Django Task schedules (TASKS' SCHEDULES): every worker of the
        # queue keeps them all, whatever its --queue; a bad one is refused here.
        self.task_schedules = task_schedules() if self.run_queued else []
        self._once = False
        # stop_now() was called: read by the loop's shut-down.
        self._at_once = False
        self.stopped_at_once = False

    # --- the loop ------------------------------------------------------------

    def run(self, *, once: bool = False) -> None:
        """Work until :meth:`stop`; with ``once``, until nothing is due or running."""
        logger.info("%s", self.start_up_line())
        backoff = self.poll
        self._once = once
        if self.run_queued:
            self.queue_threads.start(once=once, renewer=self.renewer)
        watcher = self._watch()
        queue_watcher = (
            changes.watch_queue(self.queues, wake=self.queue_threads.idle.wake)
            if self.run_queued and not once
            else None
        )
        try:
            while not self.stopping.is_set():
                self._wakeup.clear()
                if watcher is not None:
                    watcher.take()  # this tick reads them all afresh
                close_broken_connections()
                try:
                    started = self.tick()
                except TRANSIENT_ERRORS as exc:
                    backoff = back_off(logger, f"worker {self.id}", backoff, exc, self.stopping)
                    continue
                backoff = self.poll
                queue_busy = self.queue_threads.busy()
                if once and not started and not self._runs and not queue_busy:
                    break
                self._idle(watcher, queue_busy)
        finally:
            if watcher is not None:
                watcher.close()
            if queue_watcher is not None:
                queue_watcher.close()
            self._shut_down()

    def slots(self) -> tuple[int, int]:
        """(busy, total): the runs going and how many could, background runs
        and Django Tasks threads together (the metrics' slot gauges)."""
        busy, total = len(self._runs.going()), self.concurrency
        if self.run_queued:
            busy, total = busy + self.queue_threads.running(), total + self.queue_threads.count
        return busy, total

    def start_up_line(self) -> str:
        """What the worker logs as it starts: its id, its tasks, the Django
        Tasks queues it claims from (``default, emails``; ``all`` for every
        queue, without ``--queue``; ``none`` when it runs no Django Tasks),
        its concurrency and its poll."""
        if not self.run_queued:
            queues = "none"
        else:
            queues = "all" if self.queues is None else ", ".join(self.queues)
        return (
            f"worker {self.id}: {len(self.tasks)} task(s) ({', '.join(self.tasks) or 'none'}), "
            f"queue(s) ({queues}), concurrency {self.concurrency}, poll {self.poll:g} s"
        )

    def stop(self) -> None:
        """Begin a graceful stop: claim nothing more, and tell the runs to stop."""
        if not self.stopping.is_set():
            logger.info("worker %s: stopping (grace %g s)", self.id, self.grace)
        self.stopping.set()

    def signalled(self, signum: int) -> None:
        """Say at once that a graceful stop began on ``signum`` (the first
        SIGTERM or SIGINT), with the runs it waits for and for how long; the
        command then sets ``stopping``. (Said here, not when the loop has
        ended: a worker running Django Tasks alone said nothing until the
        last of them ended, up to ``--grace`` later.)"""
        waited = len(self._runs) + len(self._queued_leases())
        logger.info(
            "worker %s: %s: stopping gracefully; waiting up to %g s for %d run(s) to end, "
            "a second signal stops at once",
            self.id,
            signal.Signals(signum).name,
            self.grace,
            waited,
        )

    def stop_now(self) -> None:
        """Stop at once (the command calls it on a second SIGTERM/SIGINT): wait
        for no run; the runs still going are handed back as a graceful stop
        would hand them back, and :meth:`run` returns with
        ``stopped_at_once`` set."""
        self._at_once = True
        if not self.stopping.is_set():
            self.stopping.set()

    def _wake_all(self) -> None:
        self._wakeup.set()
        self.queue_threads.wake()

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
            next_beat = self.heartbeat.due_in()
            if next_beat < wait:
                if not self._wakeup.wait(max(next_beat, 0.0)):
                    self.heartbeat.beat_quietly(self._runs.names())
                    continue
            elif not self._wakeup.wait(wait):
                continue
            # Cleared before taking: a change pushed after the take sets it again.
            self._wakeup.clear()
            if watcher is not None and any(map(wakes_a_worker, watcher.take())):
                return

    def _work_ended(self, queue_busy: bool) -> bool:
        """A run of ours ended, or the queue threads, busy at the last poll, all did."""
        if self._runs.any_ended():
            return True
        return queue_busy and not self.queue_threads.busy()

    def tick(self) -> int:
        """One poll: claim and start what is due. Returns how many runs started."""
        self._runs.reap()
        self.heartbeat.beat(self._runs.names())
        if self.run_queued:
            self.recovery.run()
            self.rollup.run()
        # (A worker of the queue alone has nothing to read in the lease table.)
        rows = BackgroundTask.objects.work.due() if self.tasks or self.task_schedules else []
        slots.ensure_schedules([*self.tasks.values(), *self.task_schedules], rows)
        if self.task_schedules and not self.stopping.is_set():
            slots.enqueue_due(self.task_schedules, rows)
        started = 0
        for row in rows:
            task = self.tasks.get(row.name)
            if task is None or self.stopping.is_set():
                continue
            if self._step(task, row):
                started += 1
        if started:
            self.heartbeat.beat(self._runs.names(), force=True)
        return started

    # --- one name ------------------------------------------------------------

    def _step(self, task: BackgroundTaskFunction[..., Any], row: DueRow) -> bool:
        """Do what ``row`` says is due for ``task``; ``True`` if a run started."""
        if row.running or row.name in self._runs:
            # Held by a live holder (maybe us). (A run of ours that went
            # stale is left to another worker.)
            slots.skip_slot(task, row)
            return False
        if len(self._runs) >= self.concurrency:
            return False
        claimed = claim_due(task, row, self.id)
        work = claimed[1] if claimed else None
        if claimed is None or work is None:
            return False  # nothing owed, or another worker won it
        trigger = claimed[0]
        running = RunningLease.from_work(work, trigger, self.stopping, self.renewer)
        log_started(running)
        thread = task.run_in_thread(running, work.args, work.kwargs, work.trace_context)
        self._runs.add(running, thread)
        return True

    # --- stopping -------------------------------------------------------------

    def _shut_down(self) -> None:
        self.stopping.set()
        if len(self._runs):
            logger.info(
                "worker %s: stopping; waiting up to %g s for %s",
                self.id,
                self.grace,
                ", ".join(self._runs.names()),
            )
        deadline = time.monotonic() + self.grace
        self._runs.wait(deadline, self.grace, self._waiting)
        for thread in self.queue_threads.threads:
            if join(thread, deadline, self._waiting):
                logger.warning(
                    "a queued task did not stop within the grace period (%g s); its lease "
                    "expires after its ttl and a worker retries or fails it",
                    self.grace,
                )
        if self._at_once:
            self.stopped_at_once = True
            hand_back(self.id, self._runs.going(), self._queued_leases())
        self._runs.reap()
        self.renewer.close()
        self.heartbeat.gone()
        close_connection()
        logger.info("worker %s: stopped", self.id)

    def _queued_leases(self) -> list[QueuedLease]:
        """The leases of the Django Tasks this worker's threads are running."""
        if not self.run_queued:
            return []
        from django_bgtasks.queue.execute import running_leases  # (needs a Tasks framework)

        return running_leases(self.id)

    def _waiting(self, thread: threading.Thread) -> bool:
        """Whether to wait on for ``thread`` in the grace period: not after
        :meth:`stop_now`. Beats meanwhile: a worker waiting out its grace
        period is alive, and its row must say so."""
        if self._at_once:
            return False
        if self.heartbeat.due_in() <= 0:
            self.heartbeat.beat_quietly(self._runs.names())
        return True


def check_bounds(concurrency: int, poll: float, grace: float) -> None:
    """A ``ValueError`` for a worker's option out of its bounds (limits.py:
    the command's arguments are parsed against the same)."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be a whole number, 1 or more, not {concurrency!r}")
    if not 0 < poll <= MAX_POLL:
        raise ValueError(f"poll must be above 0 and at most {MAX_POLL:g} seconds, not {poll!r}")
    if not 0 <= grace <= MAX_GRACE:
        raise ValueError(f"grace must be from 0 to {MAX_GRACE:g} seconds, not {grace!r}")


def claim_due(
    task: BackgroundTaskFunction[..., Any], row: DueRow, owner: str
) -> tuple[Trigger, WorkClaim | None] | None:
    """The claim ``row`` calls for, made for ``task`` by ``owner`` (in the
    module docstring's order), and its trigger; ``None`` when nothing is
    owed (a silent holder's run is then recorded lost), or when the task is
    paused: what is owed (a resume, a request, a retry) waits for the
    unpause, and a due slot is skipped and counted."""
    if row.paused:
        slots.skip_slot(task, row)
        if row.stale and not rescue.owes_again(task, row):
            rescue.record_lost(task, row)
        return None
    if row.token > 0 and rescue.owes_again(task, row):
        trigger = Trigger.RESUME if task.resume else Trigger.RETRY
        return trigger, rescue.claim_again(task, row, owner)
    if row.requested:
        work = BackgroundTask.objects.work
        return Trigger.REQUEST, work.claim_request(row.name, owner, task.effective_ttl)
    if rescue.retry_due(task, row):
        return Trigger.RETRY, rescue.claim_retry(task, row, owner)
    if slots.slot_due(task, row):
        return Trigger.SCHEDULE, slots.claim_slot(task, row, owner)
    if row.stale:
        rescue.record_lost(task, row)
    return None


def wakes_a_worker(change: changes.Change) -> bool:
    """Whether a change may have made work due for the task: it is not
    running any more (released, ended, force-released, stale: a resume, retry
    or pending request can start), it is idle with a new request, or its row
    went away. A running task's progress or cancel request starts nothing."""
    return change.state is None or not change.state.running
