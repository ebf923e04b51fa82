"""The lease table and its history.

``BackgroundTask`` holds one row per task name: the lease (running, owner,
token, ttl, heartbeat) and the task's shared state (value, outcome). Every
replica reads and writes this row and nothing else, so they all agree.
``TaskRun`` keeps one row per finished run. Rows are written only by the lease
operations in :mod:`django_bgtasks.core.leases`, never by ``save()``.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from django_bgtasks import limits
from django_bgtasks.choices import Outcome, QueueStatus, Trigger
from django_bgtasks.core.leases import LeaseManager, RunQuerySet
from django_bgtasks.core.states import run_duration
from django_bgtasks.queue.manager import QueueManager

__all__ = [
    "BackgroundTask",
    "Outcome",
    "PausedQueue",
    "QueueRollup",
    "QueuedTask",
    "TaskRun",
    "Trigger",
    "Worker",
]

# A run's columns, on its lease row (the current or last run) and on its
# history row alike: each defined once, so the two tables can't drift apart.


def _trigger() -> models.CharField[str, str]:
    """What started the run (:class:`~django_bgtasks.choices.Trigger`); blank
    for runs from before the column existed."""
    return models.CharField(
        _("trigger"),
        max_length=limits.TRIGGER_LENGTH,
        choices=Trigger.choices,
        blank=True,
        default="",
        db_default="",
    )


def _result_note() -> models.CharField[str, str]:
    """Why the run's result was not stored, when it could not be."""
    return models.CharField(
        _("result note"),
        max_length=limits.MAX_RESULT_NOTE_LENGTH,
        blank=True,
        default="",
        db_default="",
    )


def _trace_context() -> models.CharField[str | None, str | None]:
    """Where the work was filed from, for its run's span: ``traceparent``,
    then a space and ``tracestate`` when there is one; NULL when untraced.
    Nullable, without a default, so that migration 0016 adds it to a big
    queue table at once (SQLite would rebuild the table for a default, and
    drop the lease table's history trigger with it)."""
    return models.CharField(
        _("trace context"),
        max_length=limits.MAX_TRACE_CONTEXT_LENGTH,
        null=True,
        blank=True,
    )


class BackgroundTask(models.Model):
    """One task name: its lease and its shared state. Written only through
    ``BackgroundTask.objects`` (:class:`~django_bgtasks.core.leases.LeaseManager`)."""

    # Fields alike QueuedTask's on purpose: each model declares its own table's
    # columns (the migrations record them), and both rows are leases.
    name = models.CharField(_("name"), max_length=limits.MAX_NAME_LENGTH, primary_key=True)
    value = models.JSONField(_("value"), null=True, blank=True)
    running = models.BooleanField(_("running"), default=False)
    owner = models.CharField(
        _("owner"), max_length=limits.MAX_OWNER_LENGTH, blank=True, default=""
    )
    token = models.BigIntegerField(
        _("token"),
        default=0,
        help_text=_("Fencing token: strictly increases on every claim of this name."),
    )
    ttl = models.FloatField(_("ttl (s)"))
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    updated_at = models.DateTimeField(_("last heartbeat"), null=True, blank=True)
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    outcome = models.CharField(
        _("outcome"),
        max_length=limits.OUTCOME_LENGTH,
        choices=Outcome.choices,
        blank=True,
        default="",
    )
    error = models.TextField(_("error"), blank=True, default="")
    # The current (or last) run: what started it, which attempt it is, its
    # arguments (so that a resume or retry runs with the same ones), the
    # schedule slot it runs for, and how many slots were skipped while it ran.
    trigger = _trigger()
    attempt = models.IntegerField(_("attempt"), default=0, db_default=0)
    run_args = models.JSONField(_("arguments"), null=True, blank=True)
    scheduled_for = models.DateTimeField(_("scheduled for"), null=True, blank=True)
    skipped = models.IntegerField(_("slots skipped"), default=0, db_default=0)
    # A pending request for a worker (request_run()), at most one.
    requested_at = models.DateTimeField(_("requested"), null=True, blank=True)
    requested_by = models.CharField(
        _("requested by"),
        max_length=limits.MAX_OWNER_LENGTH,
        blank=True,
        default="",
        db_default="",
    )
    request = models.JSONField(_("requested arguments"), null=True, blank=True)
    # The W3C trace context of the latest request (django_bgtasks.tracing):
    # its run's span continues the requester's trace.
    trace_context = _trace_context()
    # A scheduled task's next slot, and the schedule it was computed from
    # (a changed schedule is recomputed).
    schedule = models.CharField(
        _("schedule"), max_length=limits.MAX_SCHEDULE_LENGTH, blank=True, default="", db_default=""
    )
    next_run_at = models.DateTimeField(_("next run"), null=True, blank=True)
    # What the current (or last) run's function returned, set by its release
    # (reset by every claim); or, when it could not be stored, why not.
    result = models.JSONField(_("result"), null=True, blank=True)
    result_note = _result_note()
    # Paused by an operator (``bgtasks pause NAME``): since when, NULL when
    # not. Workers start nothing of it meanwhile; the schedule's slots that
    # come are skipped and counted here, then handed to the next run's
    # ``skipped`` by its claim (so the history counts them).
    paused_at = models.DateTimeField(_("paused"), null=True, blank=True)
    paused_skipped = models.IntegerField(_("slots skipped while paused"), default=0, db_default=0)

    objects = LeaseManager()

    class Meta:
        verbose_name = _("background task")
        verbose_name_plural = _("background tasks")
        ordering = ["name"]
        # Only the primary key is indexed, and no lease operation changes it:
        # a heartbeat rewrites ``updated_at`` alone, so PostgreSQL can do it as
        # a HOT update (no index write). The fillfactor that leaves room for
        # that is set in migration 0001.

    def __str__(self) -> str:
        return self.name


class TaskRun(models.Model):
    """One finished run of a task (history), written in the statement that ended it."""

    name = models.CharField(_("task"), max_length=limits.MAX_NAME_LENGTH)
    token = models.BigIntegerField(_("token"))
    owner = models.CharField(_("owner"), max_length=limits.MAX_OWNER_LENGTH)
    started_at = models.DateTimeField(_("started"), null=True)
    finished_at = models.DateTimeField(_("finished"), null=True)
    outcome = models.CharField(
        _("outcome"), max_length=limits.OUTCOME_LENGTH, choices=Outcome.choices
    )
    error = models.TextField(_("error"), blank=True, default="")
    value = models.JSONField(_("final value"), null=True, blank=True)
    trigger = _trigger()
    attempt = models.IntegerField(_("attempt"), default=0, db_default=0)
    scheduled_for = models.DateTimeField(_("scheduled for"), null=True, blank=True)
    skipped = models.IntegerField(_("slots skipped"), default=0, db_default=0)
    # What the run's function returned (JSON), or why it was not stored.
    result = models.JSONField(_("result"), null=True, blank=True)
    result_note = _result_note()

    objects = RunQuerySet.as_manager()

    class Meta:
        verbose_name = _("task run")
        verbose_name_plural = _("task runs")
        ordering = ["name", "-token"]
        constraints = [
            # A run is recorded once: the writes use ON CONFLICT DO NOTHING /
            # INSERT OR IGNORE on this key, and it serves "newest runs of a task".
            models.UniqueConstraint(fields=["name", "token"], name="bgtasks_run_name_token"),
        ]
        # No index on finished_at: every release would pay for it, and the one
        # query that filters on it (prune, daily at most) can afford a scan.

    def __str__(self) -> str:
        return f"{self.name} #{self.token}"

    @property
    def duration(self) -> float | None:
        """Seconds the run took, or ``None`` if either end is unknown."""
        return run_duration(self.started_at, self.finished_at)


class Worker(models.Model):
    """A ``bgtasks worker`` process, as it last reported itself. Written only
    by the worker (``BackgroundTask.objects.work.beat()``); the time is the
    database's, so every replica judges its age alike. A row whose last beat
    is older than its ``ttl`` is a silent worker (killed, stopped, or cut off
    from the database); live workers forget such rows after an hour."""

    id = models.CharField(_("worker"), max_length=limits.MAX_OWNER_LENGTH, primary_key=True)
    host = models.CharField(_("host"), max_length=limits.HOST_COLUMN_LENGTH)
    pid = models.IntegerField(_("pid"))
    tasks = models.JSONField(_("tasks"), default=list)
    concurrency = models.IntegerField(_("concurrency"))
    running = models.JSONField(_("running now"), default=list)
    # The ids of the Django Tasks the queue's recovery took back from this
    # worker once it was silent (``QueuedTask.objects.recover()``), in the
    # order they were. Written by the recovering worker, never by this one;
    # NULL in the rows of workers older than migration 0024 (none lost).
    lost = models.JSONField(_("Django Tasks lost"), null=True, blank=True)
    started_at = models.DateTimeField(_("started"))
    updated_at = models.DateTimeField(_("last heartbeat"))
    # Seconds after its last beat when the worker counts as silent, as the
    # worker stated it (three of its beats). The database default is for the
    # rows of workers older than migration 0011, which beat every 5 s.
    ttl = models.FloatField(
        _("silent after"), db_default=limits.WORKER_TTL, default=limits.WORKER_TTL
    )

    class Meta:
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        ordering = ["host", "pid"]

    def __str__(self) -> str:
        return self.id


class QueuedTask(models.Model):
    """One enqueued Django Task (``django_bgtasks.backend.LeaseBackend``) and
    its result. The row is its own lease while it runs: ``owner``, ``token``
    (rises on every claim), ``ttl`` and the heartbeat ``updated_at``, written
    only by the statements of ``QueuedTask.objects``
    (:class:`~django_bgtasks.queue.manager.QueueManager`); ``enqueue()`` inserts it
    through the ORM, so it joins the caller's transaction."""

    # Enqueue order, for the claim's ORDER BY; the TaskResult's id is ``uuid``.
    seq = models.BigAutoField(_("sequence"), primary_key=True)
    uuid = models.UUIDField(_("id"), unique=True)
    task_path = models.CharField(_("task"), max_length=limits.MAX_TASK_PATH_LENGTH)
    backend = models.CharField(_("backend"), max_length=limits.MAX_BACKEND_LENGTH)
    queue_name = models.CharField(_("queue"), max_length=limits.MAX_QUEUE_NAME_LENGTH)
    priority = models.IntegerField(_("priority"), default=0)
    takes_context = models.BooleanField(_("takes context"), default=False)
    args_kwargs = models.JSONField(_("arguments"))
    run_after = models.DateTimeField(_("run after"), null=True, blank=True)
    status = models.CharField(
        _("status"), max_length=limits.QUEUE_STATUS_LENGTH, default=QueueStatus.READY.value
    )
    enqueued_at = models.DateTimeField(_("enqueued"), db_default=Now())
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    last_attempted_at = models.DateTimeField(_("last attempted"), null=True, blank=True)
    attempts = models.IntegerField(_("attempts"), default=0)
    max_attempts = models.IntegerField(_("max attempts"), default=1)
    worker_ids = models.JSONField(_("workers"), default=list)
    errors = models.JSONField(_("errors"), default=list)
    return_value = models.JSONField(_("return value"), null=True, blank=True)
    progress = models.JSONField(_("progress"), null=True, blank=True)
    # The lease, while a worker runs it.
    owner = models.CharField(
        _("owner"), max_length=limits.MAX_OWNER_LENGTH, blank=True, default=""
    )
    token = models.BigIntegerField(_("token"), default=0)
    ttl = models.FloatField(_("ttl (s)"), default=limits.DEFAULT_TTL)
    updated_at = models.DateTimeField(_("last heartbeat"), null=True, blank=True)
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    # A unique task's key (``@task(unique=True)`` or ``lease_name=``): at most
    # one ready or running row per key.
    unique_key = models.CharField(
        _("unique key"), max_length=limits.MAX_UNIQUE_KEY_LENGTH, blank=True, default=""
    )
    # The unique key while the task is ready or running, NULL otherwise: a
    # plain unique index on it (NULLs never collide, on every vendor) is the
    # "one ready or running row per key" rule, without a partial index that
    # MySQL/MariaDB lack. The statements that end a task clear it.
    active_key = models.CharField(
        _("active unique key"),
        max_length=limits.MAX_UNIQUE_KEY_LENGTH,
        null=True,
        blank=True,
        unique=True,
    )
    # Flow limits (``@task(concurrency=N, rate_limit="N/s")``), resolved at
    # enqueue: the key of each, formed from the task's arguments, and the
    # limit. NULL keys: no limit, and a claim that pays nothing for them.
    # The claim takes a FlowSlot of each key the task has (db/shared.py).
    # NULL, not "": "no key" must not be a key the claim could look up.
    concurrency_key = models.CharField(  # noqa: DJ001
        _("concurrency key"), max_length=limits.MAX_FLOW_KEY_LENGTH, null=True, blank=True
    )
    concurrency = models.IntegerField(_("concurrency limit"), null=True, blank=True)
    rate_key = models.CharField(  # noqa: DJ001
        _("rate key"), max_length=limits.MAX_FLOW_KEY_LENGTH, null=True, blank=True
    )
    rate_limit = models.IntegerField(_("starts per window"), null=True, blank=True)
    rate_period = models.FloatField(_("rate window (s)"), null=True, blank=True)
    # A fair share (``@task(fairness_key=..., fairness_weight=...)``), formed
    # at enqueue: the key whose turn the claim weighs among ready tasks of
    # equal priority (queue/fairness.py), NULL for none, and its weight
    # (NULL without a key). Both nullable without a default: SQLite adds such
    # a column in place, where a default would make Django rebuild the table
    # without the indexes and triggers the migrations' SQL made.
    fairness_key = models.CharField(  # noqa: DJ001
        _("fairness key"), max_length=limits.MAX_FLOW_KEY_LENGTH, null=True, blank=True
    )
    fairness_weight = models.IntegerField(_("fairness weight"), null=True, blank=True)

    # The W3C trace context of the enqueue (django_bgtasks.tracing): the run's
    # span continues the enqueuer's trace.
    trace_context = _trace_context()

    objects = QueueManager()

    class Meta:
        verbose_name = _("Django task")
        verbose_name_plural = _("Django tasks")
        ordering = ["-seq"]
        # Plain indexes led by the status (not partial ones: MySQL/MariaDB
        # have none, and Django warns of them there). On PostgreSQL,
        # migration 0017 makes them partial under the same names (READY rows
        # only; RUNNING rows by owner), so that a claim and an end write
        # fewer index entries and a renewal none.
        indexes = [
            # The claim: ready tasks of a queue, by priority, then enqueue order.
            models.Index(
                fields=["status", "queue_name", "-priority", "seq"],
                name="bgtasks_queued_ready",
            ),
            # Recovery: running tasks whose heartbeat went stale.
            models.Index(fields=["status", "updated_at"], name="bgtasks_queued_running"),
            # The operator's reads, newest first: a queue's tasks, a task
            # path's, a status's; and the queues and paths there are
            # (migration 0021. On PostgreSQL a status's is an index of seq
            # for each finished status, 0023's, and one of the ready rows.)
            models.Index(fields=["queue_name", "seq"], name="bgtasks_queued_queue"),
            models.Index(fields=["task_path", "seq"], name="bgtasks_queued_task"),
            models.Index(fields=["status", "seq"], name="bgtasks_queued_status"),
        ]

    def __str__(self) -> str:
        return f"{self.task_path} {self.uuid}"

    def arguments(self) -> tuple[list[Any], dict[str, Any]]:
        """The task's ``args`` and ``kwargs``, as stored in ``args_kwargs``."""
        stored = self.args_kwargs or {}
        return list(stored.get("args", [])), dict(stored.get("kwargs", {}))


class PausedQueue(models.Model):
    """A Django Tasks queue an operator paused (``bgtasks pause --queue``):
    while its row exists, no worker claims a task of that queue name, whatever
    the backend alias that enqueued it; tasks already running finish. Written
    only by ``QueuedTask.objects.pause_queue()`` and ``unpause_queue()``."""

    queue_name = models.CharField(
        _("queue"), max_length=limits.MAX_QUEUE_NAME_LENGTH, primary_key=True
    )
    paused_at = models.DateTimeField(_("paused"), db_default=Now())

    class Meta:
        verbose_name = _("paused queue")
        verbose_name_plural = _("paused queues")
        ordering = ["queue_name"]

    def __str__(self) -> str:
        return self.queue_name


class FlowSlot(models.Model):
    """One of the N slots of a Django Task's flow limit, for one key: what
    makes the limit race-free with any number of workers claiming at once.

    A concurrency key has N rows (``kind`` ``concurrency``); a row names the
    task that holds it (``seq`` and the ``token`` of its claim) or nobody.
    A rate key has N rows (``kind`` ``rate``), each with the time a task last
    started on it: a start needs a row whose ``started_at`` is a window ago.
    The claim statement takes the rows it needs ``FOR UPDATE SKIP LOCKED``
    (db/); migration 0013's triggers create a key's rows when a task of it is
    enqueued, and give a concurrency slot back when its task stops running
    (finished, back to ready, recovered or deleted)."""

    kind = models.CharField(_("limit"), max_length=limits.FLOW_KIND_LENGTH)
    flow_key = models.CharField(_("key"), max_length=limits.MAX_FLOW_KEY_LENGTH)
    slot = models.IntegerField(_("slot"))
    seq = models.BigIntegerField(_("held by task"), null=True, blank=True)
    token = models.BigIntegerField(_("token"), null=True, blank=True)
    started_at = models.DateTimeField(_("last start"), null=True, blank=True)

    class Meta:
        verbose_name = _("flow slot")
        verbose_name_plural = _("flow slots")
        constraints = [
            models.UniqueConstraint(fields=["kind", "flow_key", "slot"], name="bgtasks_flow_slot")
        ]
        # The slot a task holds, given back when it ends (migration 0013's
        # trigger), and a key's free slots (seq NULL), without reading the
        # key's every slot.
        indexes = [
            models.Index(fields=["kind", "flow_key", "seq"], name="bgtasks_flow_slot_holder")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.flow_key} #{self.slot}"


class FairShare(models.Model):
    """A fairness key's turn among the keys of one queue: ``vtime``, the
    virtual time of its next start, which each start moves on by one over
    the key's weight (stride scheduling), so that keys with ready tasks take
    turns in proportion to their weights; NULL until the key's first start.
    Level turns go to the key whose last start is oldest. Kept by the claim
    (db/<engine>/queue.py), one row a queue and key, made when the key's
    first task is enqueued; a key alone in its queue keeps none."""

    queue_name = models.CharField(_("queue"), max_length=limits.MAX_QUEUE_NAME_LENGTH)
    fairness_key = models.CharField(_("key"), max_length=limits.MAX_FLOW_KEY_LENGTH)
    vtime = models.FloatField(_("next turn"), null=True, blank=True)
    # The virtual time its latest turn began at. The latest of a queue's is
    # the queue's clock, where a key that comes back from idle (or is new)
    # starts: so it can't bank the turns it missed while it had no work.
    turn = models.FloatField(_("latest turn"), null=True, blank=True)
    # When its last turn started, by the database's clock: between keys whose
    # next turns are level, the one that waited longest goes first.
    started_at = models.DateTimeField(_("last turn"), null=True, blank=True)

    class Meta:
        verbose_name = _("fair share")
        verbose_name_plural = _("fair shares")
        constraints = [
            models.UniqueConstraint(
                fields=["queue_name", "fairness_key"], name="bgtasks_fair_share"
            )
        ]
        indexes = [models.Index(fields=["queue_name", "turn"], name="bgtasks_fair_share_turn")]

    def __str__(self) -> str:
        return f"{self.queue_name} {self.fairness_key}"


class QueueRollup(models.Model):
    """The Django Tasks that finished in one minute or one hour, for the
    admin's dashboard: what a read of the finished rows would say, written
    once so that the dashboard reads a few thousand of these at any size of
    the queue's table. Kept by the workers (:mod:`django_bgtasks.queue.rollup`):
    a minute is rolled up once it has passed, by whichever worker finds it
    due; rolling it again writes the same numbers.

    One row is the whole cluster (``queue_name`` and ``task_path`` both
    ``""``), one queue (``task_path`` ``""``) or one task path (``queue_name``
    ``""``). ``run_times`` counts the runs by the buckets of
    ``rollup.RUN_TIME_EDGES``, so that rows add up and a percentile can be
    read from any sum of them. ``lag`` is the seconds the oldest due ready
    task had waited when the minute was rolled up, on the cluster's and the
    queues' rows of a minute rolled up as it passed (``None`` on a minute
    caught up later, and on the hours)."""

    span = models.PositiveIntegerField(_("span (s)"))
    start = models.DateTimeField(_("start"))
    queue_name = models.CharField(
        _("queue"), max_length=limits.MAX_QUEUE_NAME_LENGTH, blank=True, default=""
    )
    task_path = models.CharField(
        _("task"), max_length=limits.MAX_TASK_PATH_LENGTH, blank=True, default=""
    )
    succeeded = models.IntegerField(_("succeeded"), default=0)
    failed = models.IntegerField(_("failed"), default=0)
    run_times = models.JSONField(_("run times"), default=list)
    lag = models.FloatField(_("lag (s)"), null=True, blank=True)

    class Meta:
        verbose_name = _("queue rollup")
        verbose_name_plural = _("queue rollups")
        constraints = [
            # A scope's series, in time order: what a chart reads.
            models.UniqueConstraint(
                fields=["span", "queue_name", "task_path", "start"], name="bgtasks_rollup"
            )
        ]
        # Every scope of a window at once: the dashboard's tables, and the prune.
        indexes = [models.Index(fields=["span", "start"], name="bgtasks_rollup_window")]

    def __str__(self) -> str:
        scope = self.task_path or self.queue_name or "*"
        return f"{scope} {self.start:%Y-%m-%d %H:%M} +{self.span}s"
