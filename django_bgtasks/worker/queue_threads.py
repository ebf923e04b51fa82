"""A worker's Django Tasks threads (``bgtasks worker --queue``): each claims a
ready queued task, runs it under its lease (:mod:`django_bgtasks.queue.execute`),
and claims the next; with nothing ready, it waits ``poll`` seconds, or less
on PostgreSQL, where the change feed wakes one idle thread when a task
becomes ready (:mod:`django_bgtasks.worker.idle`). A poll that no wake-up
ended claims only once a read that locks nothing found a task ready.

Claims are made in rounds, one statement each, for every thread that wants
a task: a thread that finds no round on its way runs one at once, for itself
and every thread already waiting (``claim_many`` with that many as its
limit), and the threads that come while it is on its way wait for it to
end, then the next round claims for all of them. Each claimed task is handed
to one thread of its round, so the worker never holds a task that no thread
of its own is about to run. A thread whose task ended brings that end to
the round, and the round writes the ends it was brought with its claim
(``QueuedTask.objects.finish_and_claim``: one statement on PostgreSQL, one
query on MySQL), so between two tasks a thread waits for one round trip and
one commit (two on SQLite), shared with the other threads of its round.
Its next task is kept for it until its run's end is logged; when the worker
stops first, the task is given back.

A claim whose reply was lost with the connection may have committed: the
next round then gives back, before it claims, every task the worker claimed
and holds in no thread, so that it does not wait out its ttl as ``RUNNING``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import DatabaseError

from django_bgtasks.core.holding import Renews
from django_bgtasks.db import outages
from django_bgtasks.db.outages import TRANSIENT_ERRORS, close_broken_connections, close_connection
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.queue.groups import Group
from django_bgtasks.queue.manager import ENDED_LATE, READY, RUNNING, Claim, Ending
from django_bgtasks.worker.idle import IdleThreads
from django_bgtasks.worker.polls import back_off

if TYPE_CHECKING:
    from django_bgtasks.worker.hooks import WorkerHooks

logger = logging.getLogger("django_bgtasks.worker")

# How often, at most, a worker recovers the queued tasks of lost workers
# (``QueuedTask.objects.recover``): at its first poll a second or more after
# the last (a poll's wait is half of ``--poll`` to all of it). A recovery is a
# locking transaction, and a lost worker's task waits out its ttl (120 s by
# default) first anyway: at ``--poll 0.05``, twenty recoveries a second a
# worker cost a drain 9 % of its rate, on MariaDB and on PostgreSQL alike
# (docs/benchmarks.md).
RECOVER_EVERY_SECONDS = 1.0

# How long a round right after another waits, at most, for the threads that
# round handed a task to, once they have run it (queue/groups.py's
# ``linger``). Short tasks' threads are back within it, and rounds carry
# every thread instead of half of them: 4 workers drained 1.2-1.4 times as
# fast on every engine (docs/benchmarks.md, "Rounds that wait for the
# threads coming back"). It lengthens the bound on a result's durability by
# as much (docs/django-tasks.md).
ROUND_LINGER_SECONDS = 0.001


class QueueThreads:
    """``count`` threads of the worker ``worker_id``, claiming from ``queues``
    (all of them if ``None``) until ``stopping`` is set."""

    def __init__(
        self,
        worker_id: str,
        *,
        count: int,
        poll: float,
        queues: list[str] | None,
        stopping: threading.Event,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self.worker_id, self.count, self.poll, self.queues = worker_id, count, poll, queues
        self.stopping = stopping
        # The worker's renewer (given to start()): it renews the leases of
        # the tasks run here, with the others the worker holds.
        self.renewer: Renews | None = None
        # The worker's hooks (its metrics, say), told of each run.
        self.hooks = hooks
        self.threads: list[threading.Thread] = []
        self._once = False
        # One per thread: set by ``idle`` (a task may be ready: the change feed
        # calls its ``wake``), and on stopping.
        self._wakeups: list[threading.Event] = []
        self.idle = IdleThreads(count)
        # Guarded by ``_lock``: the seq of each queued task claimed here and not
        # yet ended (from the claim's reply to its run's end, so also while it
        # is handed to its thread), and whether a claim failed with the
        # connection, so that the worker may hold a task it never learnt of.
        # The claims are made in rounds (the module docstring), a give-back
        # only at the start of one: never while a claim is on its way, so it
        # never takes a task just claimed. Counted: a run the renewer ended as
        # timed out may still go on in its thread beside the row's next run.
        self._held: Counter[int] = Counter()
        # Tasks claimed for a thread that stopped before running them, for
        # the give-back to say so (rather than a lost reply).
        self._unrun: set[int] = set()
        self._unsure = False
        self._lock = threading.Lock()
        self._rounds: Group[_Turn, tuple[Written, Claim | None]] = Group(
            self._claim_round, linger=ROUND_LINGER_SECONDS, comes_back=_comes_back
        )
        # Each queue thread's own: ``mine`` (it is one); ``next``, the task its
        # last end's round claimed for it; ``handed_at``, its last round's end.
        self._local = threading.local()

    def start(self, *, once: bool = False, renewer: Renews | None = None) -> None:
        """Start the threads; with ``once``, each ends when nothing is ready.
        ``renewer`` renews the leases of the tasks they run."""
        self._once, self.renewer = once, renewer
        self._wakeups = [threading.Event() for _ in range(self.count)]
        if self.stopping.is_set():
            self.wake()
        for number, wakeup in enumerate(self._wakeups):
            thread = threading.Thread(
                target=self._loop, args=(wakeup,), name=f"bgtasks-queue-{number}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def wake(self) -> None:
        """The worker is stopping: every idle thread looks."""
        for wakeup in self._wakeups:
            wakeup.set()

    def busy(self) -> bool:
        """Some thread is still going."""
        return any(thread.is_alive() for thread in self.threads)

    def claim(self, *, give_back: bool = False) -> Claim | None:
        """A queued task for the calling thread, claimed in the next round (the
        module docstring) and recorded as held here; ``None`` when that round
        found none for it. Raises what the round's claim raised. With
        ``give_back`` (a claim before failed with the connection), the round
        first :meth:`_give_back_unheld`."""
        if give_back:
            with self._lock:
                self._unsure = True
        return self._submit(_Turn(None, True))[1]

    def _nothing_ready(self) -> bool:
        """An idle poll's read before its claim: no task is ready, and no
        give-back (which only a claim's round makes) is owed. It locks and
        writes nothing; on MariaDB an empty claim costs the server 8 times it."""
        with self._lock:
            if self._unsure:
                return False
        return not QueuedTask.objects.any_ready(queues=self.queues)

    def write_end(self, ending: Ending) -> Written:
        """Write a run's end in the next round (what ``finish`` would return).
        Brought by a queue thread of this worker that is not stopping, it
        also wants that thread's next task, kept for it (:meth:`_loop`)."""
        want = getattr(self._local, "mine", False) and not self.stopping.is_set()
        want = want and getattr(self._local, "next", None) is None
        handed_at = self._local.__dict__.pop("handed_at", None)
        quick = handed_at is not None and time.monotonic() - handed_at < ROUND_LINGER_SECONDS
        written, claim = self._submit(_Turn(ending, want, quick))
        if claim is not None:
            self._local.next = claim
        return written

    def _submit(self, turn: _Turn) -> tuple[Written, Claim | None]:
        """``turn`` in the next round, which may write on this thread's
        connection: first closed if the thread's last task broke it or left it
        in a transaction (as after a request), where it would never commit."""
        close_broken_connections()
        written, claim = self._rounds.submit(turn)
        self._local.handed_at = time.monotonic()
        return written, claim

    def _claim_round(self, turns: list[_Turn]) -> list[tuple[Written, Claim | None]]:
        """One round: the give-back owed, if any, then one statement for the
        ends the ``turns`` bring and a claim for each that wants a task,
        handed out in their order (neither: a thread that ends, and only
        gives back)."""
        with self._lock:
            if self._unsure:
                self._give_back_unheld()
                self._unsure = False
        # One end a row per statement: a second (a run timed out by the
        # renewer, still going in its thread, ending beside the row's next
        # run here) is written alone after it, and only one of them matches.
        ends: dict[int, Ending] = {}
        for turn in turns:
            if turn.ending is not None:
                ends.setdefault(turn.ending.seq, turn.ending)
        limit = sum(turn.want for turn in turns)
        written: dict[int, dt.datetime | bool] = {}
        claimed: list[Claim] = []
        if ends or limit:
            try:
                written, claimed = QueuedTask.objects.finish_and_claim(
                    list(ends.values()), self.worker_id, queues=self.queues, limit=limit
                )
            except TRANSIENT_ERRORS:
                if limit:
                    with self._lock:
                        self._unsure = True  # its reply may be what was lost
                raise
            log_round(len(turns), len(ends), len(claimed), self._rounds.lingered)
            with self._lock:
                self._held.update(claim.seq for claim in claimed)  # (Counter: one more each)
        handed = iter(claimed)
        return [
            (_written(turn.ending, ends, written), next(handed, None) if turn.want else None)
            for turn in turns
        ]

    def _give_back_unheld(self) -> None:
        """Put back in the queue every task this worker claimed and holds in no
        thread: a claim that committed, its reply lost with the connection.
        Without this, it would wait out its ttl as ``RUNNING``, then count
        as a lost attempt. Called with ``_lock`` held, in a round (no claim
        on its way)."""
        for given in QueuedTask.objects.give_back(self.worker_id, held=self._held):
            named = f"queued task {given.task_path} {given.uuid} on worker {self.worker_id}"
            if given.seq in self._unrun:  # (a stop's, not an outage's: said at INFO)
                logger.info("%s: claimed as the worker stopped, not run; back in the queue", named)
            else:
                logger.warning("%s: the reply to its claim was lost; back in the queue", named)
        self._unrun.clear()

    def _loop(self, wakeup: threading.Event) -> None:
        """Claim a ready task, run it, repeat; when there is none, wait ``poll``
        seconds or until ``wakeup`` (a task became ready, on PostgreSQL; a
        stop). With ``once``, stop then."""
        backoff = self.poll
        # The last wait ran out, with no wake-up: a poll, whose claim waits
        # for a read that finds a task ready (``_nothing_ready``).
        polled = False
        self._local.mine = True
        try:
            while not self.stopping.is_set():
                # Cleared before the claim: a task ready after it sets it again.
                wakeup.clear()
                claim = self._local.__dict__.pop("next", None)
                try:
                    if claim is None and not (polled and self._nothing_ready()):
                        claim = self.claim()
                except TRANSIENT_ERRORS as exc:
                    who = f"worker {self.worker_id}: queue"
                    backoff = back_off(logger, who, backoff, exc, self.stopping)
                    continue
                backoff = self.poll
                if claim is None:
                    if self._once:
                        return
                    # (A stop that came before the clear above: seen here.)
                    if not self.stopping.is_set():
                        polled = not self.idle.wait(wakeup, self.poll)
                    continue
                polled = False
                # More may be ready (a burst sends one notification): the
                # next idle thread looks while this one runs its task.
                self.idle.wake(owe=False)
                self._run(claim, backoff)
        finally:
            # A task claimed for this thread that it will not run: given back
            # by the round below, as every task claimed here and not held.
            kept = self._local.__dict__.pop("next", None)
            if kept is not None:
                with self._lock:
                    self._held -= Counter([kept.seq])
                    self._unrun.add(kept.seq)
                    self._unsure = True
            # Stopping before the database came back: one last try.
            with contextlib.suppress(DatabaseError):
                self._submit(_Turn(None, False))
            close_connection()

    def _run(self, claim: Claim, backoff: float) -> None:
        """Run one claimed task to its end, logged; never raise."""
        # Imported here: it needs Django's Tasks framework (django.tasks or the
        # backport), which a worker of background tasks alone may not have.
        from django_bgtasks.queue.execute import execute

        log_started(claim)
        if self.hooks is not None:
            self.hooks.queued_started(claim)
        try:
            status = execute(
                claim, stopping=self.stopping, renewer=self.renewer, write_end=self.write_end
            )
        except TRANSIENT_ERRORS as exc:
            # Its end could not be written before the lease's deadline: the
            # row is recovered after its ttl.
            logger.warning("%s: database unreachable: %s", claim.described, outages.summary(exc))
            close_connection()
            self.stopping.wait(backoff)
            return
        except BaseException:
            # execute() records whatever the task raised; anything else (a
            # signal receiver's KeyboardInterrupt, say) must not end this
            # thread either: with --concurrency 1 no task would run again.
            # Signals never arrive here (they reach the main thread), so
            # nothing is swallowed that meant "stop": that is ``stopping``.
            logger.exception("%s: the worker failed to run it", claim.described)
            return
        finally:
            with self._lock:
                self._held -= Counter([claim.seq])
        duration = time.monotonic() - claim.sent_at
        log_ended(claim, status, duration)
        if self.hooks is not None:
            self.hooks.queued_ended(claim, status, duration, self.stopping.is_set())

    def running(self) -> int:
        """How many queued tasks are claimed here and not ended (a timed-out
        run still going in its thread counts, beside its row's next run)."""
        with self._lock:
            return sum(self._held.values())


class Recovery:
    """A worker's recoveries of the queued tasks of lost workers, made by its polls."""

    def __init__(self) -> None:
        self._next = 0.0  # (monotonic) when the next poll recovers

    def run(self) -> None:
        """Queued tasks whose worker went silent past their ttl: ready again
        while attempts remain, else failed ("worker lost"); unless the last
        recovery here was less than RECOVER_EVERY_SECONDS ago."""
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + RECOVER_EVERY_SECONDS
        by_owner: dict[str, list[str]] = defaultdict(list)
        for lost in QueuedTask.objects.recover():
            logger.warning(
                "queued task %s %s: its worker %s was lost (no heartbeat within the ttl); now %s",
                lost.task_path,
                lost.uuid,
                lost.owner,
                lost.status,
            )
            by_owner[lost.owner].append(str(lost.uuid))
        # Their rows name no owner now: the lost worker's row keeps their ids.
        for owner, result_ids in by_owner.items():
            BackgroundTask.objects.work.lost(owner, result_ids)


# What a run's finish returned (QueuedTask.objects.finish): the time it
# ended, True for READY, None when the lease was no longer its.
Written = dt.datetime | bool | None


def _written(
    ending: Ending | None, ends: dict[int, Ending], written: dict[int, dt.datetime | bool]
) -> Written:
    """What a round wrote of ``ending`` (its thread's end, if any): from the
    round's statement, or, for a second end of one row, from one of its own."""
    if ending is None:
        return None
    if ends[ending.seq] is not ending:
        # Not raised: the round's claims are made, and must be handed out.
        # Unwritten, that run's row is the recovery's (as a lost lease's).
        with contextlib.suppress(*TRANSIENT_ERRORS):
            return QueuedTask.objects.finish_many([ending]).get(ending.seq)
        return None
    return written.get(ending.seq)


def _comes_back(turn: _Turn, outcome: tuple[Written, Claim | None]) -> bool:
    """Whether a round's ``turn`` will be followed by another of its thread
    within the linger: it was handed its next task, and it ended its last
    one within the linger of being handed it. Judged by the thread's last
    task: a worker of long tasks never waits, and a thread whose short task
    is followed by a long one is waited for once, a linger at most. A thread
    only claiming (an idle one woken, the first of a burst) is not waited
    for: its task may be long."""
    return turn.quick and outcome[1] is not None


class _Turn(NamedTuple):
    """A thread's part in a round: the end of its run to write, if any,
    whether it wants a task, and whether its thread ended that run within
    ``ROUND_LINGER_SECONDS`` of being handed the task (:func:`_comes_back`)."""

    ending: Ending | None
    want: bool
    quick: bool = False


def log_round(threads: int, ended: int, took: int, lingered: float) -> None:
    """Say at DEBUG what a round of ``threads`` did, and how long it waited
    for threads coming back (``lingered`` seconds: queue/groups.py)."""
    logger.debug(
        "queue: one round for %d thread(s) ended %d and took %d"
        " (it waited %.1f ms for threads coming back)",
        threads,
        ended,
        took,
        lingered * 1000,
    )


def log_started(claim: Claim) -> None:
    """Say at INFO that ``claim``'s run started, with its token, attempt and
    queue (the record's ``extra`` has the queue as ``queue``)."""
    logger.info(
        "%s started (token %d, attempt %d, queue %s)",
        claim.described,
        claim.token,
        claim.attempts,
        claim.queue_name,
        extra={**_extra(claim), "queue": claim.queue_name},
    )


def log_ended(claim: Claim, status: str, duration: float) -> None:
    """Say at INFO how ``claim``'s run ended (the status it left the row in,
    :func:`ended`), after ``duration`` seconds, with its token and attempt;
    the record's ``extra`` has them as ``outcome`` (the status), ``duration``,
    ``token`` and ``attempt``."""
    logger.info(
        "%s (token %d, attempt %d) ended: %s after %.3f s",
        claim.described,
        claim.token,
        claim.attempts,
        ended(status),
        duration,
        extra={**_extra(claim), "outcome": status, "duration": duration},
    )


def _extra(claim: Claim) -> dict[str, Any]:
    """The ``extra`` of a queued run's log records: as a ``QueuedLease``'s
    (``task``, ``token``, ``owner``), and its ``attempt``."""
    return {
        "task": f"{claim.task_path} {claim.uuid}",
        "token": claim.token,
        "owner": claim.owner,
        "attempt": claim.attempts,
    }


def ended(status: str) -> str:
    """How a queued task's run ended, from the status it left the row in."""
    if status == READY:
        return f"{READY} (to be run again)"
    if status == RUNNING:
        return "its lease was lost (the recovery ends it)"
    if status == ENDED_LATE:
        return "timed out (its worker had ended it; the late return wrote nothing)"
    return status
