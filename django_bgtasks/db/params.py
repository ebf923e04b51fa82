"""The parameters of every operation, one typed object each: what crosses
into the drivers (:mod:`django_bgtasks.db.engines`' ``read``, ``write`` and
``write_together``). Each names the statement it runs (``STATEMENT``, a field
of :class:`~django_bgtasks.db.shared.Statements` or, with ``QUEUE``,
:class:`~django_bgtasks.db.shared.QueueStatements`), and its fields are the
statement's ``%(name)s`` parameters, as Python values. A field in ``TIMES``
(an aware datetime, or None) and one in ``LISTS`` (a list) are encoded by the
connection's engine (its driver's ``time_param`` and ``list_param``); the
rest go as they are. Their values are checked by the callers, before a
parameter object is made; ``tests/db/test_params.py`` checks that each
object's fields are its statement's parameters on every engine.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields
from typing import Any, ClassVar


@dataclass(slots=True, eq=False, match_args=False)
class Params:
    """The parameters of one statement.

    Each kind is a dataclass with slots, but no ``__eq__`` (nothing compares
    them) and not frozen (each is made, handed over and dropped): a worker
    process defines every kind at its start, and those two cost 2.5 times
    the rest (37 ms against 17 for the module, on the 2-core machine)."""

    STATEMENT: ClassVar[str]
    QUEUE: ClassVar[bool] = False
    TIMES: ClassVar[tuple[str, ...]] = ()
    LISTS: ClassVar[tuple[str, ...]] = ()

    def values(self) -> dict[str, Any]:
        """The fields by name, as they are (not encoded)."""
        kind = type(self)
        names = _NAMES.get(kind)
        if names is None:
            names = _NAMES[kind] = tuple(field.name for field in fields(self))
        return {name: getattr(self, name) for name in names}


# Each kind's field names, read once (dataclasses.fields() reads them anew).
_NAMES: dict[type[Params], tuple[str, ...]] = {}


# --- The lease operations ---------------------------------------------------------------


@dataclass(slots=True, eq=False, match_args=False)
class Claim(Params):
    """``try_claim``: a lease nobody holds, or whose holder went silent."""

    STATEMENT = "claim"
    name: str
    owner: str
    value: str | None
    ttl: float
    trigger: str
    args: str | None


@dataclass(slots=True, eq=False, match_args=False)
class Renew(Params):
    """A holder's heartbeat."""

    STATEMENT = "renew"
    name: str
    owner: str
    token: int | None


@dataclass(slots=True, eq=False, match_args=False)
class RenewWithValue(Params):
    """A holder's heartbeat that writes its value."""

    STATEMENT = "renew_with_value"
    name: str
    owner: str
    token: int | None
    value: str | None


@dataclass(slots=True, eq=False, match_args=False)
class Release(Params):
    """A holder's end of its run, recorded in history."""

    STATEMENT = "release"
    name: str
    owner: str
    token: int | None
    value: str | None
    outcome: str
    error: str
    result: str | None
    result_note: str


@dataclass(slots=True, eq=False, match_args=False)
class Fence(Params):
    """The lock of a holder's live lease, in the caller's transaction."""

    STATEMENT = "fence"
    name: str
    owner: str
    token: int | None


@dataclass(slots=True, eq=False, match_args=False)
class ForceRelease(Params):
    """An operator's end of whoever holds a lease (of one claim, with ``token``)."""

    STATEMENT = "force_release"
    name: str
    token: int | None
    outcome: str
    error: str


@dataclass(slots=True, eq=False, match_args=False)
class RequestCancel(Params):
    """An operator's cancel request to a live holder."""

    STATEMENT = "request_cancel"
    name: str
    token: int | None


@dataclass(slots=True, eq=False, match_args=False)
class ExpireStale(Params):
    """The end of every silent holder's lease (or of one name's)."""

    STATEMENT = "expire_stale"
    name: str | None
    token: int | None
    outcome: str
    error: str


@dataclass(slots=True, eq=False, match_args=False)
class GetState(Params):
    """One task's state."""

    STATEMENT = "get_state"
    name: str


@dataclass(slots=True, eq=False, match_args=False)
class ListStates(Params):
    """Every task's state."""

    STATEMENT = "list_states"


@dataclass(slots=True, eq=False, match_args=False)
class RequestRun(Params):
    """An operator's request that the workers run a task."""

    STATEMENT = "request_run"
    name: str
    ttl: float
    request: str | None
    requested_by: str
    trace_context: str | None


@dataclass(slots=True, eq=False, match_args=False)
class Pause(Params):
    """An operator's pause of a task."""

    STATEMENT = "pause"
    name: str
    ttl: float


@dataclass(slots=True, eq=False, match_args=False)
class Unpause(Params):
    """An operator's unpause of a task."""

    STATEMENT = "unpause"
    name: str


# --- The workers' ------------------------------------------------------------------------


@dataclass(slots=True, eq=False, match_args=False)
class ClaimRequest(Params):
    """A worker's claim of a requested run."""

    STATEMENT = "claim_request"
    name: str
    owner: str
    ttl: float
    trigger: str


@dataclass(slots=True, eq=False, match_args=False)
class ClaimScheduled(Params):
    """A worker's claim of a schedule's slot ``due``, moving it on to ``next``."""

    STATEMENT = "claim_scheduled"
    TIMES = ("due", "next")
    name: str
    owner: str
    ttl: float
    trigger: str
    due: dt.datetime
    next: dt.datetime
    schedule: str


@dataclass(slots=True, eq=False, match_args=False)
class ClaimResume(Params):
    """A worker's claim of a lost or interrupted run ``expect``, again."""

    STATEMENT = "claim_resume"
    name: str
    owner: str
    ttl: float
    trigger: str
    expect: int | None
    max_attempts: int
    interrupted: str
    lost: str
    resume: bool


@dataclass(slots=True, eq=False, match_args=False)
class ClaimRetry(Params):
    """A worker's claim of a failed or timed-out run ``expect``, ``delay`` seconds on."""

    STATEMENT = "claim_retry"
    name: str
    owner: str
    ttl: float
    trigger: str
    expect: int | None
    max_attempts: int
    failed: str
    timed_out: str
    delay: float
    resume: bool


@dataclass(slots=True, eq=False, match_args=False)
class SkipSlot(Params):
    """A schedule's slot ``due`` skipped, moved on to ``next``."""

    STATEMENT = "skip_slot"
    TIMES = ("due", "next")
    name: str
    due: dt.datetime
    next: dt.datetime
    schedule: str


@dataclass(slots=True, eq=False, match_args=False)
class TakeSlot(Params):
    """A Django Task schedule's slot ``due`` taken, in the caller's transaction."""

    STATEMENT = "take_slot"
    TIMES = ("due", "next")
    name: str
    due: dt.datetime
    next: dt.datetime
    schedule: str


@dataclass(slots=True, eq=False, match_args=False)
class EnsureSchedule(Params):
    """A schedule's row and first slot (``next`` None: no schedule)."""

    STATEMENT = "ensure_schedule"
    TIMES = ("next",)
    name: str
    schedule: str
    next: dt.datetime | None
    ttl: float


@dataclass(slots=True, eq=False, match_args=False)
class DueWork(Params):
    """What the workers may claim now."""

    STATEMENT = "due_work"


@dataclass(slots=True, eq=False, match_args=False)
class Clock(Params):
    """The database's time."""

    STATEMENT = "clock"


@dataclass(slots=True, eq=False, match_args=False)
class WorkerBeat(Params):
    """A worker's report that it is alive, and what it runs."""

    STATEMENT = "worker_beat"
    id: str
    host: str
    pid: int
    tasks: str | None
    concurrency: int
    running: str | None
    ttl: float


@dataclass(slots=True, eq=False, match_args=False)
class WorkerGone(Params):
    """A worker's row removed: it stopped cleanly."""

    STATEMENT = "worker_gone"
    id: str


@dataclass(slots=True, eq=False, match_args=False)
class WorkerLost(Params):
    """The Django Tasks recovered from a lost worker, added to its row."""

    STATEMENT = "worker_lost"
    id: str
    lost: str | None


@dataclass(slots=True, eq=False, match_args=False)
class ForgetWorkers(Params):
    """The rows of workers silent for more than ``seconds`` removed."""

    STATEMENT = "forget_workers"
    seconds: float


@dataclass(slots=True, eq=False, match_args=False)
class ListWorkers(Params):
    """Every worker's last report."""

    STATEMENT = "list_workers"


@dataclass(slots=True, eq=False, match_args=False)
class RenewMany(Params):
    """One worker's renewal of every lease it holds (``shared.renew_many_param``)."""

    STATEMENT = "renew_many"
    leases: str


# --- The queue's (Django Tasks) -------------------------------------------------------


@dataclass(slots=True, eq=False, match_args=False)
class Enqueue(Params):
    """The tasks of ``rows`` (JSON text: ``shared.ENQUEUE_COLUMNS``), each
    with the columns of one Task."""

    STATEMENT = "enqueue"
    QUEUE = True
    task_path: str
    queue_name: str
    priority: int
    takes_context: bool
    # As the connection's Django backend stores a DateTimeField (its
    # ``adapt_datetimefield_value``): the ORM's encoding, not the driver's.
    run_after: Any
    backend: str
    max_attempts: int
    ttl: float
    concurrency: int | None
    rate_limit: int | None
    rate_period: float | None
    unique_key: str
    active_key: str | None
    trace_context: str | None
    rows: str


@dataclass(slots=True, eq=False, match_args=False)
class QueueClaim(Params):
    """A worker's claim of up to ``limit`` ready tasks of ``queues`` (of all, with ``all``)."""

    STATEMENT = "claim"
    QUEUE = True
    LISTS = ("queues",)
    owner: str
    all: bool
    queues: list[str]
    limit: int


@dataclass(slots=True, eq=False, match_args=False)
class PlainClaim(QueueClaim):
    """A claim of queues whose ready tasks have no fairness key, as last seen
    (QueuedTask.objects sends the claim the last one named)."""

    STATEMENT = "plain_claim"


@dataclass(slots=True, eq=False, match_args=False)
class LoneClaim(QueueClaim):
    """A claim of queues whose keyed tasks are one queue's lone key, as last seen."""

    STATEMENT = "lone_claim"


@dataclass(slots=True, eq=False, match_args=False)
class AnyReady(Params):
    """An idle worker's poll: whether a task of ``queues`` is ready."""

    STATEMENT = "any_ready"
    QUEUE = True
    LISTS = ("queues",)
    all: bool
    queues: list[str]


@dataclass(slots=True, eq=False, match_args=False)
class QueueRenew(Params):
    """A queued task's heartbeat (writing its progress, with ``set_progress``)."""

    STATEMENT = "renew"
    QUEUE = True
    seq: int
    owner: str
    token: int
    set_progress: bool
    progress: str | None


@dataclass(slots=True, eq=False, match_args=False)
class Finish(Params):
    """The end of a queued task's run."""

    STATEMENT = "finish"
    QUEUE = True
    seq: int
    owner: str
    token: int
    status: str
    return_value: str | None
    error: str | None
    refund: int
    delay: float


@dataclass(slots=True, eq=False, match_args=False)
class FinishMany(Params):
    """The ends of several runs (``ends``: JSON text, one end a run)."""

    STATEMENT = "finish_many"
    QUEUE = True
    ends: str


@dataclass(slots=True, eq=False, match_args=False)
class FinishClaim(Params):
    """The ends of several runs and the next claim, in one statement (or in
    one transaction: ``write_together`` of ``finish_many`` and ``claim``)."""

    STATEMENT = "finish_claim"
    QUEUE = True
    LISTS = ("queues",)
    ends: str
    owner: str
    all: bool
    queues: list[str]
    limit: int


@dataclass(slots=True, eq=False, match_args=False)
class PlainFinishClaim(FinishClaim):
    """``FinishClaim`` with the plain claim (``PlainClaim``)."""

    STATEMENT = "plain_finish_claim"


@dataclass(slots=True, eq=False, match_args=False)
class LoneFinishClaim(FinishClaim):
    """``FinishClaim`` with the lone key's claim (``LoneClaim``)."""

    STATEMENT = "lone_finish_claim"


@dataclass(slots=True, eq=False, match_args=False)
class Ended(Params):
    """Whether a run ended with ``status`` under this claim: a lost reply's answer."""

    STATEMENT = "ended"
    QUEUE = True
    seq: int
    owner: str
    token: int
    status: str


@dataclass(slots=True, eq=False, match_args=False)
class GiveBack(Params):
    """The tasks ``owner`` claimed and does not hold (``held``), put back."""

    STATEMENT = "give_back"
    QUEUE = True
    LISTS = ("held",)
    owner: str
    held: list[int]


@dataclass(slots=True, eq=False, match_args=False)
class Recover(Params):
    """Every running task whose heartbeat is older than its ttl, taken back."""

    STATEMENT = "recover"
    QUEUE = True


@dataclass(slots=True, eq=False, match_args=False)
class Cancel(Params):
    """An operator's cancel of one task (``uuid`` as the column takes it)."""

    STATEMENT = "cancel"
    QUEUE = True
    uuid: Any


@dataclass(slots=True, eq=False, match_args=False)
class Retry(Params):
    """An operator's retry of one failed task (``uuid`` as the column takes it)."""

    STATEMENT = "retry"
    QUEUE = True
    uuid: Any


@dataclass(slots=True, eq=False, match_args=False)
class CancelMany(Params):
    """An operator's cancel of the rows ``seqs``."""

    STATEMENT = "cancel_many"
    QUEUE = True
    LISTS = ("seqs",)
    seqs: list[int]


@dataclass(slots=True, eq=False, match_args=False)
class RetryMany(Params):
    """An operator's retry of the rows ``seqs``."""

    STATEMENT = "retry_many"
    QUEUE = True
    LISTS = ("seqs",)
    seqs: list[int]


@dataclass(slots=True, eq=False, match_args=False)
class PauseQueue(Params):
    """An operator's pause of a queue name."""

    STATEMENT = "pause_queue"
    QUEUE = True
    queue: str


@dataclass(slots=True, eq=False, match_args=False)
class UnpauseQueue(Params):
    """An operator's unpause of a queue name."""

    STATEMENT = "unpause_queue"
    QUEUE = True
    queue: str


@dataclass(slots=True, eq=False, match_args=False)
class PausedQueues(Params):
    """The paused queue names."""

    STATEMENT = "paused_queues"
    QUEUE = True


@dataclass(slots=True, eq=False, match_args=False)
class QueueNames(Params):
    """The queue names there are."""

    STATEMENT = "queue_names"
    QUEUE = True


@dataclass(slots=True, eq=False, match_args=False)
class TaskPaths(Params):
    """The task paths there are."""

    STATEMENT = "task_paths"
    QUEUE = True


@dataclass(slots=True, eq=False, match_args=False)
class IndexReads(Params):
    """What makes the rest of a transaction's reads follow the queue's indexes."""

    STATEMENT = "index_reads"
    QUEUE = True
