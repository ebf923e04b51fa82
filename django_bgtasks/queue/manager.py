"""The Django Tasks queue's operations: ``QueuedTask.objects``.

``enqueue()`` is one statement on the ``BGTASKS_DATABASE`` alias, whatever
the number of tasks, that joins the caller's transaction (a rolled-back view
enqueues nothing). The workers' operations (claim, renew, finish, ended,
give_back, recover; ``claim_many``, ``finish_many`` for several tasks, and
``finish_and_claim``, both at once) and the operator's cancel and
retry are each a statement, or one transaction, of :mod:`django_bgtasks.db`,
and refuse ``atomic()`` (:class:`InAtomicBlock`) as the lease operations do:
a claim or a heartbeat that a rollback could undo would not be a lease.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import json
import time
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import IntegrityError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from django_bgtasks.choices import QueueStatus
from django_bgtasks.conf import conf
from django_bgtasks.core.states import as_datetime, json_column
from django_bgtasks.db import engines, read_database
from django_bgtasks.db import params as params_of
from django_bgtasks.db.rows import Row
from django_bgtasks.db.shared import QueueStatements
from django_bgtasks.validation import (
    encode_value,
    is_finite_number,
    validate_limit,
    validate_owner,
    validate_queue_name,
    validate_queue_names,
)

if TYPE_CHECKING:
    from django_bgtasks.models import QueuedTask  # noqa: F401  (the managers' type argument)

# choices.QueueStatus's values, as plain strings: what rows hold and the
# statements take as parameters.
# A bulk cancel's passes over the rows workers were writing as it ran
# (cancel_many), and the pause between two: a worker holds a row for one
# statement, so a second pass finds it free.
CANCEL_PASSES = 50
CANCEL_PASS_WAIT = 0.02
READY: str = QueueStatus.READY.value
RUNNING: str = QueueStatus.RUNNING.value
SUCCESSFUL: str = QueueStatus.SUCCESSFUL.value
FAILED: str = QueueStatus.FAILED.value
FINISHED = (SUCCESSFUL, FAILED)
# Not a row's status: what a run's execute() answers when its thread returned
# after its worker had ended it past its timeout and grace (the worker wrote
# that end; the late return writes nothing, and is no lost lease).
ENDED_LATE = "ENDED_LATE"
# The paused queues' model, looked up in the app registry (models -> queue).
_PAUSED_QUEUE = "PausedQueue"
# What a run's end leaves a row in: READY again (a retry, a stop), or finished.
ENDS = (READY, *FINISHED)
FINISH_CLAIM = ("finish_many", "claim")
# Which claim this process sends (db/shared.py's ``plain_claim``): the one
# the last claim of these queues (by database alias, ``all`` and queue
# names) named. A guess, this process's own, that another process may make
# otherwise: every claim is exact whatever it says (a plain claim leaves the
# keyed tasks it can't order to a fuller claim, and names it), so a stale
# guess costs a round trip more, or a larger statement, never a task out
# of turn. "plain" is the first guess. The claims from least to most.
_NEXT_CLAIM: dict[tuple[str, bool, tuple[str, ...]], str] = {}
_CLAIMS = ("plain", "lone", "full")
_CLAIM_KINDS: dict[str, type[params_of.QueueClaim]] = {
    "plain": params_of.PlainClaim,
    "lone": params_of.LoneClaim,
    "full": params_of.QueueClaim,
}
_FINISH_CLAIM_KINDS: dict[str, type[params_of.FinishClaim]] = {
    "plain": params_of.PlainFinishClaim,
    "lone": params_of.LoneFinishClaim,
    "full": params_of.FinishClaim,
}
# Set on a connection while its transaction is one of index_reads().
_INDEX_READS = "_bgtasks_index_reads"


@dataclass(frozen=True)
class Claim:
    """A queued task a worker claimed: what it needs to run it, and its lease."""

    seq: int
    uuid: uuid.UUID
    task_path: str
    backend: str
    queue_name: str
    priority: int
    takes_context: bool
    args: list[Any]
    kwargs: dict[str, Any]
    run_after: dt.datetime | None
    enqueued_at: dt.datetime | None
    started_at: dt.datetime | None
    last_attempted_at: dt.datetime | None
    attempts: int
    max_attempts: int
    worker_ids: list[str]
    owner: str
    token: int
    ttl: float
    # When this process sent the claim (``time.monotonic()``): the holder's
    # renew deadline counts from it (core/holding.py).
    sent_at: float
    # The enqueue's trace context, for the run's span (django_bgtasks.tracing).
    trace_context: str | None = None

    @property
    def described(self) -> str:
        """How a log line names the run: the task's path and id, and its worker."""
        return f"queued task {self.task_path} {self.uuid} on worker {self.owner}"

    # Alike core.states' from_row()s on purpose: a field from each column of its own statement.
    @classmethod
    def from_row(cls, row: Mapping[str, Any], owner: str, sent_at: float) -> Claim:
        """From the claim's RETURNING row, by the names of ``db.shared.CLAIM_COLUMNS``."""
        arguments = json_column(row["args_kwargs"])
        return cls(
            seq=int(row["seq"]),
            uuid=uuid.UUID(str(row["uuid"])),
            task_path=row["task_path"],
            backend=row["backend"],
            queue_name=row["queue_name"],
            priority=int(row["priority"]),
            takes_context=bool(row["takes_context"]),
            args=list(arguments["args"]),
            kwargs=dict(arguments["kwargs"]),
            run_after=as_datetime(row["run_after"]),
            enqueued_at=as_datetime(row["enqueued_at"]),
            started_at=as_datetime(row["started_at"]),
            last_attempted_at=as_datetime(row["last_attempted_at"]),
            attempts=int(row["attempts"]),
            max_attempts=int(row["max_attempts"]),
            worker_ids=list(json_column(row["worker_ids"])),
            owner=owner,
            token=int(row["token"]),
            ttl=float(row["ttl"]),
            sent_at=sent_at,
            trace_context=row["trace_context"],
        )


class GivenBack(NamedTuple):
    """A task a worker claimed and never ran, back in the queue (``give_back``)."""

    seq: int
    uuid: uuid.UUID
    task_path: str


class Recovered(NamedTuple):
    """A task whose worker went silent, made ready or failed (``recover``):
    ``status`` is its new one, ``owner`` the worker that was lost."""

    uuid: uuid.UUID
    status: str
    task_path: str
    owner: str


@dataclass(frozen=True)
class Ending:
    """How one claimed run ended, for :meth:`QueueManager.finish_many`: the
    claim's ``seq``, ``owner`` and ``token`` (its fence), and what
    :meth:`QueueManager.finish` takes."""

    seq: int
    owner: str
    token: int
    status: str
    return_value: str | None = None
    error: dict[str, str] | None = None
    refund: bool = False
    # A retry's delay: READY again, run_after this many seconds from now by
    # the database's clock (0: at once).
    delay: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """One element of ``finish_many``'s ``ends`` (db/shared.py)."""
        return {**dataclasses.asdict(self), "refund": 1 if self.refund else 0}


def _tables(model: type[models.Model]) -> dict[str, str]:
    """The queue's tables: ``model``'s, the paused queues' and the flow slots'
    (those models looked up beside it, not imported: models -> queue)."""
    meta = model._meta
    paused = meta.apps.get_model(meta.app_label, _PAUSED_QUEUE)
    slots = meta.apps.get_model(meta.app_label, "FlowSlot")
    shares = meta.apps.get_model(meta.app_label, "FairShare")
    return {
        "table": meta.db_table,
        "paused": paused._meta.db_table,
        "slots": slots._meta.db_table,
        "shares": shares._meta.db_table,
    }


def _delay(delay: float) -> float:
    """A retry's delay in seconds: 0 or more, finite (refused before any SQL)."""
    if not is_finite_number(delay) or delay < 0:
        raise ValueError(f"a retry's delay is a finite number of seconds >= 0, not {delay!r}")
    return float(delay)


class QueueQuerySet(models.QuerySet["QueuedTask"]):
    """Queued tasks on the ``BGTASKS_DATABASE`` alias (inside an operator's
    list, the read database: db/read_database.py), named by state."""

    def ready(self) -> QueueQuerySet:
        """Waiting for a worker (maybe for their ``run_after``)."""
        return self.using(read_database.alias()).filter(status=READY)

    def running(self) -> QueueQuerySet:
        """Claimed by a worker (whose heartbeat may have gone stale)."""
        return self.using(read_database.alias()).filter(status=RUNNING)

    def finished(self) -> QueueQuerySet:
        """Succeeded or failed."""
        return self.using(read_database.alias()).filter(status__in=FINISHED)

    def finished_before(self, days: float) -> QueueQuerySet:
        """Finished more than ``days`` ago (what ``bgtasks prune`` deletes)."""
        cutoff = timezone.now() - dt.timedelta(days=days)
        return self.finished().filter(finished_at__lt=cutoff)


class QueueManager(models.Manager["QueuedTask"]):
    """``QueuedTask.objects``: see the module docstring."""

    def get_queryset(self) -> QueueQuerySet:
        return QueueQuerySet(self.model, using=self._db)

    def ready(self) -> QueueQuerySet:
        """See :meth:`QueueQuerySet.ready`."""
        return self.get_queryset().ready()

    def running(self) -> QueueQuerySet:
        """See :meth:`QueueQuerySet.running`."""
        return self.get_queryset().running()

    def finished(self) -> QueueQuerySet:
        """See :meth:`QueueQuerySet.finished`."""
        return self.get_queryset().finished()

    def finished_before(self, days: float) -> QueueQuerySet:
        """See :meth:`QueueQuerySet.finished_before`."""
        return self.get_queryset().finished_before(days)

    # --- the backend's --------------------------------------------------------------

    def enqueue(self, task: Mapping[str, Any], rows: str) -> dict[str, dt.datetime | None]:
        """Store the tasks of ``rows`` (JSON text: ``db.shared.ENQUEUE_COLUMNS``
        says what it holds), each with the columns of ``task`` (``task_path``,
        ``backend``, ..., ``active_key``), in one statement that joins the
        caller's transaction on ``BGTASKS_DATABASE``: the backend's enqueue is
        not durable on return, it commits or rolls back with the caller's work.
        The ``enqueued_at`` of each task stored, by its ``uuid`` in 32 hex
        digits: a unique task whose key another ready or running task holds
        is not stored."""
        connection = self._connection()
        params = params_of.Enqueue(
            **{
                **task,
                "run_after": connection.ops.adapt_datetimefield_value(task["run_after"]),
                "rows": rows,
            }
        )
        # As the ORM's save() does: an error inside the caller's atomic()
        # marks it for rollback (PostgreSQL has aborted its transaction).
        with transaction.mark_for_rollback_on_error(using=connection.alias):
            stored = engines.read(connection, self._statements, params)
        # UTC text, which one statement's rows share: each time parsed once.
        parsed = functools.cache(as_datetime)
        return {row["uuid"]: parsed(row["enqueued_at"]) for row in stored}

    # --- the worker's statements ------------------------------------------------

    def claim(self, owner: str, *, queues: list[str] | None) -> Claim | None:
        """Claim the first ready task of ``queues`` (every queue when ``None``):
        highest priority first, then enqueue order, skipping rows other
        workers are claiming. The lease's ttl is the row's (the backend's
        ``TTL`` when it was enqueued). ``None`` when there is none."""
        claimed = self.claim_many(owner, queues=queues, limit=1)
        return claimed[0] if claimed else None

    def claim_many(self, owner: str, *, queues: list[str] | None, limit: int) -> list[Claim]:
        """Claim up to ``limit`` ready tasks of ``queues`` in one statement, in
        the order :meth:`claim` takes them (the list is in that order too).
        Each has its own token and attempt, and its lease's ttl is its row's;
        they share ``sent_at``. Empty when none is ready. A ``limit`` that is
        not a whole number from 1 is refused before any SQL."""
        return self._write_claim(_claim_params(owner, queues, validate_limit(limit)))

    def any_ready(self, *, queues: list[str] | None) -> bool:
        """Whether a task of ``queues`` (all with ``None``) is ready, but for the flow
        limits: an idle worker's poll, a read that locks nothing (shared.ready_probe)."""
        params = params_of.AnyReady(queues is None, _queue_names(queues))
        rows = engines.read(self._connection(), self._statements, params)
        return bool(rows[0]["ready"])

    def renew(
        self, claim: Claim, *, progress: Any = None, set_progress: bool = False
    ) -> bool | None:
        """Heartbeat (writing ``progress`` with ``set_progress``). ``None`` when the
        lease is no longer this claim's; else whether a cancel was requested."""
        params = params_of.QueueRenew(
            claim.seq,
            claim.owner,
            claim.token,
            set_progress=set_progress,
            progress=encode_value(progress, kind="progress") if set_progress else None,
        )
        rows = self._write(params)
        return bool(rows[0]["cancel_requested"]) if rows else None

    def finish(
        self,
        claim: Claim,
        *,
        status: str,
        return_value: str | None = None,
        error: dict[str, str] | None = None,
        refund: bool = False,
        delay: float = 0.0,
    ) -> dt.datetime | bool | None:
        """End the claim's run with ``status`` (``READY`` again for a retry or an
        interrupted run; ``refund`` gives the attempt back; ``delay`` puts
        ``run_after`` that many seconds from now, by the database's clock), the
        JSON text of ``return_value`` and one more ``error``. The time it finished (by the
        database's clock; ``True`` for ``READY``, which has none), or ``None``
        when the lease is no longer this claim's: nothing is written."""
        params = params_of.Finish(
            claim.seq,
            claim.owner,
            claim.token,
            status=status,
            return_value=return_value,
            error=None if error is None else json.dumps(error),
            refund=1 if refund else 0,
            delay=_delay(delay),
        )
        rows = self._write(params)
        if not rows:
            return None
        return as_datetime(rows[0]["finished_at"]) or True

    def finish_many(self, ends: Sequence[Ending]) -> dict[int, dt.datetime | bool]:
        """:meth:`finish` for several runs in one statement: each row is written
        only where its own ending matches (its seq, owner and token, status
        ``RUNNING`` and a live lease), the others are left as they are. What
        :meth:`finish` would have returned for each row written, by its
        ``seq``; a row missing was not written. A status that is not an end,
        or one seq twice, is refused before any SQL."""
        return self._write_ends(ends, _ends_param(ends))

    def finish_and_claim(
        self, ends: Sequence[Ending], owner: str, *, queues: list[str] | None, limit: int
    ) -> tuple[dict[int, dt.datetime | bool], list[Claim]]:
        """:meth:`finish_many` for ``ends``, then :meth:`claim_many` of up to ``limit``
        tasks (none with an int 0) for ``owner``: what each returns. On PostgreSQL one
        statement, whose claim takes no task or slot its ends freed (the next does); on
        MySQL one transaction (an error writes neither); on SQLite one, then the other.
        Bad ends, owner or limit are refused before any SQL."""
        if not (type(limit) is int and limit == 0):
            limit = validate_limit(limit)
        connection = self._connection()
        claim = _claim_params(owner, queues, limit)
        param = _ends_param(ends)
        # One of them, nothing to send, or SQLite: there one transaction for
        # both was measured slower than two (docs/benchmarks.md).
        if not (ends and limit) or engines.driver(connection).ends_then_claim_apart:
            return self._write_ends(ends, param), self._write_claim(claim) if limit else []
        sent = time.monotonic()
        params = params_of.FinishClaim(param, claim.owner, claim.all, claim.queues, claim.limit)
        if not self._statements(connection).finish_claim:
            return self._write_ends_claim(connection, params, sent)
        rows = self._claim_rows(params)
        return _ended(rows[0]), _claimed(rows, claim.owner, sent)

    def ended(self, claim: Claim, *, status: str) -> dt.datetime | bool | None:
        """What :meth:`finish` returned, for a finish whose reply was lost (the
        connection broke after it was sent): the time it finished (``True``
        for ``READY``) when the row ended with ``status`` under this claim's
        owner and token, else ``None``. Reads only."""
        rows = self._write(params_of.Ended(claim.seq, claim.owner, claim.token, status))
        if not rows:
            return None
        return as_datetime(rows[0]["finished_at"]) or True

    def give_back(self, owner: str, *, held: Collection[int]) -> list[GivenBack]:
        """Put back in the queue the tasks ``owner`` claimed and does not hold:
        claims whose reply was lost when the connection broke, so the worker
        never learnt of them. Each is ``READY`` again with the attempt given
        back, without waiting for its ttl. ``held`` is the ``seq`` of every
        claim the worker does hold; the caller must keep its own claims from
        landing while this runs (:class:`~django_bgtasks.worker.loop.Worker` does,
        with a lock). The tasks given back."""
        params = params_of.GiveBack(validate_owner(owner), sorted(held))
        return [
            GivenBack(int(row["seq"]), uuid.UUID(str(row["uuid"])), row["task_path"])
            for row in self._write(params)
        ]

    def recover(self) -> list[Recovered]:
        """Every running task whose heartbeat is older than its ttl, by the
        database's clock: ready again while attempts remain, else failed with
        an error saying the worker was lost. Each, with its new status and
        the worker that was lost."""
        rows = self._write(params_of.Recover())
        return [
            Recovered(uuid.UUID(str(row["uuid"])), row["status"], row["task_path"], row["owner"])
            for row in rows
        ]

    def cancel(self, result_id: uuid.UUID | str) -> str | None:
        """An operator's cancel: a ready task fails at once without running; a
        running one is asked to stop (its next ``check()`` raises). The status
        after, or ``None`` when the task is unknown or already finished."""
        rows = self._write(params_of.Cancel(self._uuid(result_id)))
        return str(rows[0]["status"]) if rows else None

    def retry(self, result_id: uuid.UUID | str) -> bool:
        """An operator's retry of a failed task, once its cause is fixed: it is
        ready to run at once (``run_after`` cleared), its finish and return
        value cleared, its errors kept, with one more attempt if it had used
        them all. Whether it was retried: ``False``, with nothing written,
        when the task is unknown or not ``FAILED``, or is a unique task whose
        key another ready or running task holds. The next claim raises the
        token, as for any claim; on PostgreSQL, migration 0010's trigger
        announces the task ready to the workers. A malformed id is a
        ``ValueError`` before any SQL."""
        params = params_of.Retry(self._uuid(result_id))
        try:
            rows = self._write(params)
        except IntegrityError:
            # PostgreSQL: another task took the unique key between the
            # statement's check and its write (the index refused the second holder).
            return False
        return bool(rows)

    def cancel_many(self, seqs: Sequence[int]) -> dict[int, str]:
        """:meth:`cancel` of each of the tasks ``seqs``, a statement a pass (an
        operator's bulk cancel, operations/bulk.py): the status after of each
        it cancelled or asked to stop; a finished or unknown one is not there.

        The statement waits for no row (``FOR UPDATE SKIP LOCKED``): one that
        held some rows while it waited for a worker's, as the worker's end
        waited for one of those, was a deadlock, and the database ended one
        of the two (tests/faults/test_backend_workers.py, a bulk cancel racing
        two workers). The rows a worker was writing at that moment (its claim,
        its end) are tried again, a pass at a time, until none is left ready,
        or running and not yet asked to stop; after ``CANCEL_PASSES`` passes
        the rest are left as they are (not in the answer)."""
        changed: dict[int, str] = {}
        pending = list(seqs)
        for attempt in range(CANCEL_PASSES):
            if not pending:
                break
            if attempt:
                time.sleep(CANCEL_PASS_WAIT)
            rows = self._write(params_of.CancelMany([int(seq) for seq in pending]))
            changed.update({int(row["seq"]): str(row["status"]) for row in rows})
            pending = list(
                self.using(conf.DATABASE)
                .filter(seq__in=pending)
                .filter(models.Q(status=READY) | models.Q(status=RUNNING, cancel_requested=False))
                .values_list("seq", flat=True)
            )
        return changed

    def retry_many(self, seqs: Sequence[int]) -> int:
        """:meth:`retry` of each of the tasks ``seqs``, in one statement: how
        many it retried. Two failed runs of one unique key in ``seqs`` are
        retried one at a time (the unique index refuses both at once, and so
        the statement), so that the first is and the second is left failed."""
        if not seqs:
            return 0
        try:
            return len(self._write(params_of.RetryMany([int(seq) for seq in seqs])))
        except IntegrityError:
            if len(seqs) == 1:  # its key taken since the statement's check
                return 0
            return sum(self.retry_many([seq]) for seq in seqs)

    # --- the operator's pause of a queue ------------------------------------------

    def pause_queue(self, queue: str) -> bool:
        """Pause the queue name ``queue`` for every backend alias: no claim
        takes a task of it until :meth:`unpause_queue`; running ones finish.
        ``False`` when it was paused already. A malformed name is refused
        before any SQL."""
        return bool(self._write(params_of.PauseQueue(validate_queue_name(queue))))

    def unpause_queue(self, queue: str) -> bool:
        """Let the workers claim the tasks of ``queue`` again; ``False`` when
        it was not paused."""
        return bool(self._write(params_of.UnpauseQueue(validate_queue_name(queue))))

    def paused_queues(self) -> dict[str, dt.datetime | None]:
        """The paused queue names, each with when it was paused."""
        rows = engines.read(self._read_connection(), self._statements, params_of.PausedQueues())
        return {str(row["queue_name"]): as_datetime(row["paused_at"]) for row in rows}

    # --- the operator's reads ------------------------------------------------------

    def queue_names(self) -> list[str]:
        """The queue names that have tasks, each once, sorted: a loose scan
        of the queue's index (one descent a name), whatever the table's size."""
        return self._values(params_of.QueueNames())

    def task_paths(self) -> list[str]:
        """The task paths that have tasks, each once, sorted (as :meth:`queue_names`)."""
        return self._values(params_of.TaskPaths())

    @contextlib.contextmanager
    def index_reads(self) -> Iterator[None]:
        """A transaction for the operator's reads of the queue, each an index
        read in ``seq`` order that a LIMIT stops, which keeps the planner to
        such reads whatever its statistics say (PostgreSQL's
        ``index_reads``: db/postgresql/queue.py). Nested, it is the outer
        one's; elsewhere, a transaction. On the read database inside an
        operator's list (db/read_database.py)."""
        connection = self._read_connection()
        if getattr(connection, _INDEX_READS, False):
            yield
            return
        with transaction.atomic(using=connection.alias):
            if self._statements(connection).index_reads:
                engines.read(connection, self._statements, params_of.IndexReads())
            setattr(connection, _INDEX_READS, True)
            try:
                yield
            finally:
                setattr(connection, _INDEX_READS, False)

    def _values(self, params: params_of.QueueNames | params_of.TaskPaths) -> list[str]:
        rows = engines.read(self._read_connection(), self._statements, params)
        return [str(row["value"]) for row in rows]

    # --- plumbing -----------------------------------------------------------------

    def _uuid(self, result_id: uuid.UUID | str) -> Any:
        """``result_id`` as the ``uuid`` column takes it (a ``ValueError`` if it is no UUID)."""
        value = uuid.UUID(str(result_id))
        field = self.model._meta.get_field("uuid")
        return field.get_db_prep_value(value, self._connection())

    @staticmethod
    def _connection() -> BaseDatabaseWrapper:
        return connections[conf.DATABASE]

    @staticmethod
    def _read_connection() -> BaseDatabaseWrapper:
        """The operator's reads' connection: ``BGTASKS_DATABASE``'s, or inside
        an operator's list the read database's (db/read_database.py)."""
        return connections[read_database.alias()]

    def _statements(self, connection: BaseDatabaseWrapper) -> QueueStatements:
        return engines.queue_statements(connection, **_tables(self.model))

    # claim_many's and finish_many's statements, for finish_and_claim too (which
    # checks and builds their parameters once).
    def _write_claim(self, params: params_of.QueueClaim) -> list[Claim]:
        """The claim of ``params``, checked and built by ``_claim_params``."""
        sent = time.monotonic()
        return _claimed(self._claim_rows(params), params.owner, sent)

    def _claim_rows(self, params: params_of.QueueClaim | params_of.FinishClaim) -> list[Row]:
        """The rows of the claim of ``params`` (with the ends it holds): the
        claim the last claim of these queues named (``_NEXT_CLAIM``) where
        the vendor has several, else the one."""
        connection = self._connection()
        if not self._statements(connection).plain_claim:
            return self._write(params)
        seen = (connection.alias, params.all, tuple(params.queues))
        claim = _NEXT_CLAIM.get(seen, "plain")
        if isinstance(params, params_of.FinishClaim):
            rows = self._write(_FINISH_CLAIM_KINDS[claim](**params.values()))
        else:
            rows = self._write(_CLAIM_KINDS[claim](**params.values()))
        taken, answer = 0, rows
        # (A full claim that claimed nothing returns no row: the guess stays.)
        while answer:
            taken += sum(row["seq"] is not None for row in answer)
            named = answer[0]["next_claim"]
            _NEXT_CLAIM[seen] = named
            if _CLAIMS.index(named) <= _CLAIMS.index(claim) or taken == params.limit:
                break
            # The claim stopped at a keyed task it must leave: the fuller
            # claim it named takes the rest (a round trip more, when a guess
            # turns out wrong), so that a claim takes what the full claim
            # alone would have.
            claim = named
            kind = _CLAIM_KINDS[claim]
            answer = self._write(
                kind(params.owner, params.all, params.queues, params.limit - taken)
            )
            rows = rows + answer
        return rows

    def _write_ends(self, ends: Sequence[Ending], param: str) -> dict[int, dt.datetime | bool]:
        """``finish_many``'s statement for ``ends``, whose parameter ``param``
        (``_ends_param``) checked them: nothing is sent for no ends."""
        return _by_seq(self._write(params_of.FinishMany(param))) if ends else {}

    def _write_ends_claim(
        self, connection: BaseDatabaseWrapper, params: params_of.FinishClaim, sent: float
    ) -> tuple[dict[int, dt.datetime | bool], list[Claim]]:
        """``finish_and_claim`` on MySQL: one transaction (one query, where allowed)."""
        ended, claimed = engines.write_together(
            connection,
            "QueuedTask.objects.finish_and_claim",
            self._statements,
            FINISH_CLAIM,
            params,
        )
        return _by_seq(ended), _claimed(claimed, params.owner, sent)

    def _write(self, params: params_of.Params) -> list[Row]:
        operation = f"QueuedTask.objects.{params.STATEMENT}"
        return engines.write(self._connection(), operation, self._statements, params)


def _claimed(rows: list[Row], owner: str, sent: float) -> list[Claim]:
    """The claims of a claim's rows, in the claim's order (RETURNING has none):
    a row without a ``seq`` claimed nothing (a claim's row that says only
    what it saw, or the ends of ``finish_claim``)."""
    claimed = [Claim.from_row(row, owner, sent) for row in rows if row["seq"] is not None]
    return sorted(claimed, key=lambda claim: (-claim.priority, claim.seq))


def _claim_params(owner: str, queues: list[str] | None, limit: int) -> params_of.QueueClaim:
    """A claim's parameters: its owner, queues (every one with ``None``) and limit."""
    return params_of.QueueClaim(validate_owner(owner), queues is None, _queue_names(queues), limit)


def _queue_names(queues: list[str] | None) -> list[str]:
    """The ``queues`` parameter of ``queues`` (every one with ``None``, and ``all``)."""
    # Each name once: a claim reads each of its queues apart (db/), and twice
    # would count its rows twice against their flow limits.
    return list(dict.fromkeys(validate_queue_names(queues)))


def _by_seq(rows: list[Row]) -> dict[int, dt.datetime | bool]:
    """What ``finish_many`` returns, from its rows: each row's finish by seq."""
    return {int(row["seq"]): as_datetime(row["finished_at"]) or True for row in rows}


def _ended(row: Row) -> dict[int, dt.datetime | bool]:
    """What ``finish_many`` returns, from the arrays of a ``finish_claim`` row."""
    seqs, ats = row["ended_seq"] or [], row["ended_at"] or []
    return {int(seq): as_datetime(at) or True for seq, at in zip(seqs, ats, strict=True)}


def _ends_param(ends: Sequence[Ending]) -> str:
    """The JSON array ``finish_many`` takes, once ``ends`` are checked: one
    end a run, each an end status, with a delay it can store."""
    seqs = [ending.seq for ending in ends]
    if len(set(seqs)) != len(seqs):
        raise ValueError(f"each run ends once: a seq is repeated in {seqs}")
    for ending in ends:
        if ending.status not in ENDS:
            raise ValueError(f"a run ends {', '.join(ENDS)}, not {ending.status!r}")
        _delay(ending.delay)
    return json.dumps([ending.as_json() for ending in ends])
