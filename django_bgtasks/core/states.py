"""What the lease operations hand back: ``Lease``, ``Renewal``, ``TaskState``,
and for the workers ``DueRow``, ``WorkClaim``, ``WorkerState`` and ``WorkerRun``.

Frozen values, with the rules derived from a row (status, progress, held,
duration) as their properties, so that the admin, the API and the command read
them alike. Nothing here touches the database, so every layer may import it.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_bgtasks.choices import Status, WorkerRunStatus
from django_bgtasks.limits import WORKER_TTL
from django_bgtasks.validation import is_finite_number


@dataclass(frozen=True, slots=True)
class Lease:
    """A successful claim. ``token`` is the fencing token: pass it to every
    write, and to any other system that can check it. ``sent_at`` is when
    this process sent the claim that won it (``time.monotonic()``; when the
    value was made, if not given): where the holder's own count of the ttl
    starts, even after a claim that waited."""

    name: str
    owner: str
    token: int
    ttl: float
    sent_at: float = field(default_factory=time.monotonic, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Renewal:
    """What a holder learns from a successful heartbeat or update."""

    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class TaskState:
    """One task's row as every replica sees it.

    ``running`` is already ``False`` when the holder's heartbeat is older than
    its ttl; ``stale`` is then ``True`` and says why. ``heartbeat_age`` is the
    seconds since the last heartbeat, by the database's clock.
    """

    name: str
    value: Any
    running: bool
    owner: str
    token: int
    ttl: float
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    updated_at: dt.datetime | None
    cancel_requested: bool
    outcome: str
    error: str
    stale: bool
    heartbeat_age: float | None
    # For workers: a pending request, the next schedule slot, and what the
    # current (or last) run is: its attempt (1, 2, ...) and trigger.
    requested_at: dt.datetime | None = None
    next_run_at: dt.datetime | None = None
    attempt: int = 0
    trigger: str = ""
    # What the last run's function returned (JSON), or why it was not stored.
    result: Any = None
    result_note: str = ""
    # Paused by an operator since then (``None``: not paused), and the
    # schedule's slots skipped while paused, not yet in a run's history.
    paused_at: dt.datetime | None = None
    paused_skipped: int = 0
    # The schedule slot the current or last run was for; a Django Tasks
    # schedule's row (queue/task_schedules.py), which never runs, the slot of the
    # task it last enqueued.
    scheduled_for: dt.datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TaskState:
        """Build from a state read's row, by the names of ``db.shared.STATE_COLUMNS``
        (one per field), as every vendor returns it."""
        heartbeat_age = row["heartbeat_age"]
        # Alike the other from_row()s on purpose: each names its own fields.
        return cls(
            name=row["name"],
            value=json_column(row["value"]),
            running=bool(row["running"]),
            owner=row["owner"],
            token=int(row["token"]),
            ttl=float(row["ttl"]),
            started_at=as_datetime(row["started_at"]),
            finished_at=as_datetime(row["finished_at"]),
            updated_at=as_datetime(row["updated_at"]),
            cancel_requested=bool(row["cancel_requested"]),
            outcome=row["outcome"],
            error=row["error"],
            stale=bool(row["stale"]),
            heartbeat_age=None if heartbeat_age is None else float(heartbeat_age),
            requested_at=as_datetime(row["requested_at"]),
            next_run_at=as_datetime(row["next_run_at"]),
            attempt=int(row["attempt"]),
            trigger=row["trigger"],
            result=json_column(row["result"]),
            result_note=row["result_note"],
            paused_at=as_datetime(row["paused_at"]),
            paused_skipped=int(row["paused_skipped"]),
            scheduled_for=as_datetime(row["scheduled_for"]),
        )

    @classmethod
    def never_run(cls, name: str, ttl: float) -> TaskState:
        """The state of a task that has no row yet (registered, never claimed):
        token 0, not running, no times; its status is ``never run``."""
        return cls(
            name=name,
            value=None,
            running=False,
            owner="",
            token=0,
            ttl=ttl,
            started_at=None,
            finished_at=None,
            updated_at=None,
            cancel_requested=False,
            outcome="",
            error="",
            stale=False,
            heartbeat_age=None,
        )

    @property
    def status(self) -> Status:
        """``running``, ``cancel requested``, ``stale``, ``paused``,
        ``requested``, ``idle``, or ``never run`` (never claimed, nothing
        requested). A paused task's run that is still going reads
        ``running`` (or ``cancel requested``, ``stale``) until it ends:
        the status says first what the lease does; ``paused_at`` says it is
        paused all along."""
        if self.running:
            return Status.CANCEL_REQUESTED if self.cancel_requested else Status.RUNNING
        if self.stale:
            return Status.STALE
        if self.paused_at is not None:
            return Status.PAUSED
        if self.requested_at is not None:
            return Status.REQUESTED
        if self.started_at is None and self.scheduled_for is None:
            return Status.NEVER_RUN
        # (A Django Tasks schedule's row has enqueued a task: it is at work.)
        return Status.IDLE

    @property
    def held(self) -> bool:
        """Someone holds the lease, live or silent: what force release would end."""
        return self.running or self.stale

    @property
    def progress(self) -> float | None:
        """0-1 from ``value["done"]/value["total"]`` or ``value["progress"]``."""
        value = self.value
        if not isinstance(value, dict):
            return None
        done, total = value.get("done"), value.get("total")
        if is_finite_number(done) and is_finite_number(total) and total > 0:
            return float(min(max(done / total, 0.0), 1.0))
        progress = value.get("progress")
        if is_finite_number(progress):
            return float(min(max(progress, 0.0), 1.0))
        return None

    @property
    def duration(self) -> float | None:
        """Seconds from the claim to the release, or to now (by the database's
        clock) while the lease is held or stale."""
        if self.started_at is None:
            return None
        if self.finished_at is not None:
            return (self.finished_at - self.started_at).total_seconds()
        if self.updated_at is None or self.heartbeat_age is None:
            return None
        return (self.updated_at - self.started_at).total_seconds() + self.heartbeat_age

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict: times in ISO 8601, plus ``status`` and ``progress``
        (``result`` and ``result_note`` included)."""
        data = asdict(self)
        times = (
            "started_at", "finished_at", "updated_at", "requested_at", "next_run_at",
            "scheduled_for",
        )  # fmt: skip
        for key in (*times, "paused_at"):
            if data[key] is not None:
                data[key] = data[key].isoformat()
        data["status"] = str(self.status)
        data["progress"] = self.progress
        return data


@dataclass(frozen=True, slots=True)
class DueRow:
    """One lease row as the workers' poll sees it (``db.shared.DUE_COLUMNS``).

    ``db_now`` is the database's clock at the poll, from which the next slot
    is computed; a claim of the slot ``next_run_at`` compares it for equality.
    """

    name: str
    token: int
    running: bool
    stale: bool
    attempt: int
    outcome: str
    requested: bool
    schedule: str
    next_run_at: dt.datetime | None
    slot_due: bool
    finished_age: float | None
    db_now: dt.datetime
    # The run's return value could not be stored: it failed with its work done,
    # so it is not retried (runner.RunningLease.finish).
    result_not_stored: bool = False
    # An operator paused it: nothing is claimed, a due slot is skipped.
    paused: bool = False

    # Alike TaskState.from_row() on purpose: a field from each column of its own statement.
    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DueRow:
        """Build from a poll's row, by the names of ``db.shared.DUE_COLUMNS`` (one
        per field), as every vendor returns it."""
        now = as_datetime(row["db_now"])
        assert now is not None  # the statement always selects the clock
        finished_age = row["finished_age"]
        # Alike the other from_row()s on purpose: each names its own fields.
        return cls(
            name=row["name"],
            token=int(row["token"]),
            running=bool(row["running"]),
            stale=bool(row["stale"]),
            attempt=int(row["attempt"]),
            outcome=row["outcome"],
            requested=bool(row["requested"]),
            schedule=row["schedule"],
            next_run_at=as_datetime(row["next_run_at"]),
            slot_due=bool(row["slot_due"]),
            finished_age=None if finished_age is None else float(finished_age),
            db_now=now,
            result_not_stored=bool(row["result_not_stored"]),
            paused=bool(row["paused"]),
        )


@dataclass(frozen=True, slots=True)
class WorkClaim:
    """A worker's successful claim: the lease, which attempt this is, the run's
    arguments, for a resumed run the last value the lost run wrote, and the
    trace context the latest request stored (django_bgtasks.tracing)."""

    lease: Lease
    attempt: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    resume_from: Any
    trace_context: str | None = None

    @classmethod
    def from_row(cls, lease_of: Callable[[int], Lease], row: Mapping[str, Any]) -> WorkClaim:
        """Build from a claim's ``RETURNING token, attempt, run_args, value,
        trace_context``, by name."""
        run_args, value = json_column(row["run_args"]), json_column(row["value"])
        run_args = run_args if isinstance(run_args, dict) else {}
        return cls(
            lease=lease_of(int(row["token"])),
            attempt=int(row["attempt"]),
            args=tuple(run_args.get("args", ())),
            kwargs=dict(run_args.get("kwargs", {})),
            resume_from=value,
            trace_context=row["trace_context"],
        )


@dataclass(frozen=True, slots=True)
class HeldTask:
    """A Django Task whose row a worker holds (``RUNNING``, its ``owner``):
    its result ``id``, its ``task`` path, when its run began (``started_at``,
    its claim, by the database's clock), its ``token``, and whether its
    heartbeat is older than its ttl (``stale``: a worker's next poll puts it
    back in the queue, or fails it). The queue's rows are the truth of who
    runs a Django Task; ``operations/workers.py`` reads them."""

    id: str
    task: str
    started_at: dt.datetime | None
    token: int
    stale: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "started_at": None if self.started_at is None else self.started_at.isoformat(),
            "token": self.token,
            "stale": self.stale,
        }


@dataclass(frozen=True, slots=True)
class LostTask:
    """A Django Task that the queue's recovery took back from a worker lost
    while it ran it (the worker's row keeps the id), and what became of it
    since, as its row says now: ``status`` and ``owner`` (the worker of its
    latest claim, who may run it now or have ended it). ``task`` and
    ``status`` are empty when the row is gone (pruned, or deleted)."""

    id: str
    task: str = ""
    status: str = ""
    owner: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "task": self.task, "status": self.status, "owner": self.owner}


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """A run that a worker last reported running, and what became of it
    (:meth:`WorkerState.with_runs`). ``owner``, ``token``, ``heartbeat_age``
    and ``outcome`` are its lease row's now (empty when there is none)."""

    name: str
    status: WorkerRunStatus
    owner: str = ""
    token: int = 0
    heartbeat_age: float | None = None
    outcome: str = ""

    @classmethod
    def of(cls, worker: WorkerState, name: str, state: TaskState | None) -> WorkerRun:
        """The rule: a live worker's report stands; a silent worker's run is
        what its lease row says, judged by the database's clock (``state``)."""
        if not worker.silent:
            return cls(name, WorkerRunStatus.RUNNING)
        if state is None:
            return cls(name, WorkerRunStatus.ENDED)
        if state.owner != worker.id:
            status = WorkerRunStatus.TAKEN_OVER
        elif state.running:
            status = WorkerRunStatus.HELD
        elif state.stale:
            status = WorkerRunStatus.STALE
        else:
            status = WorkerRunStatus.ENDED
        return cls(name, status, state.owner, state.token, state.heartbeat_age, state.outcome)


@dataclass(frozen=True, slots=True)
class WorkerState:
    """A ``bgtasks worker`` process as it last reported itself; ``age`` is the
    seconds since its last heartbeat, by the database's clock, and ``silent``
    says (by the same clock) that it is older than the ``ttl`` the worker
    stated: the worker was killed, is stopped, or can't reach the database.
    ``running`` is what it reported; ``runs`` says what became of each."""

    id: str
    host: str
    pid: int
    tasks: list[str]
    concurrency: int
    running: list[str]
    started_at: dt.datetime | None
    updated_at: dt.datetime | None
    age: float
    ttl: float = WORKER_TTL
    silent: bool = False
    runs: tuple[WorkerRun, ...] = ()
    # The ids of the Django Tasks the queue's recovery took back from it.
    lost: list[str] = field(default_factory=list)
    # The Django Tasks whose rows it holds, and those it lost with what
    # became of each (operations/workers.py adds both).
    django_tasks: tuple[HeldTask, ...] = ()
    lost_tasks: tuple[LostTask, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WorkerState:
        """Build from a row of the workers' list, by the names of
        ``db.shared.WORKER_COLUMNS`` (one per field but ``runs``)."""
        return cls(
            id=row["id"],
            host=row["host"],
            pid=int(row["pid"]),
            tasks=list(json_column(row["tasks"])),
            concurrency=int(row["concurrency"]),
            running=list(json_column(row["running"])),
            lost=list(json_column(row["lost"]) or ()),
            started_at=as_datetime(row["started_at"]),
            updated_at=as_datetime(row["updated_at"]),
            age=float(row["age"]),
            ttl=float(row["ttl"]),
            silent=bool(row["silent"]),
        )

    def with_runs(self, states: Mapping[str, TaskState]) -> WorkerState:
        """This report with ``runs``: each reported run as :meth:`WorkerRun.of`
        judges it from its lease row in ``states`` (by name)."""
        runs = tuple(WorkerRun.of(self, name, states.get(name)) for name in self.running)
        return replace(self, runs=runs)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict, times in ISO 8601."""
        data = asdict(self)
        for key in ("started_at", "updated_at"):
            if data[key] is not None:
                data[key] = data[key].isoformat()
        data["runs"] = [{**run, "status": str(run["status"])} for run in data["runs"]]
        data["django_tasks"] = [task.as_json() for task in self.django_tasks]
        del data["lost"]  # (its ids are in lost_tasks, with what became of each)
        data["lost_tasks"] = [task.as_json() for task in self.lost_tasks]
        return data


def run_duration(started_at: dt.datetime | None, finished_at: dt.datetime | None) -> float | None:
    """Seconds a finished run took, or ``None`` if either end is unknown."""
    if started_at is None or finished_at is None:
        return None
    return (finished_at - started_at).total_seconds()


def json_column(value: Any) -> Any:
    """A JSON column's value from what any vendor returns for it from raw SQL
    (the one place that decodes one): psycopg decodes ``jsonb`` itself, the
    others hand back the JSON text, which is decoded here (``bytes`` too)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def as_datetime(value: object) -> dt.datetime | None:
    """An aware datetime from what either vendor returns for a time column."""
    # PostgreSQL hands back aware datetimes; SQLite hands back the naive UTC
    # times that the statements wrote (as datetimes or as text, depending on
    # the column's declared type).
    if value is None:
        return None
    parsed = value if isinstance(value, dt.datetime) else parse_datetime(str(value))
    if parsed is not None and timezone.is_naive(parsed):
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed
