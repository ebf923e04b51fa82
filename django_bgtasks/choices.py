"""The names of every state: ``Status`` (of a task), ``Outcome`` and ``Trigger`` (of a
run), ``WorkerRunStatus`` (of a run a worker last reported), ``QueueStatus`` (of
a Django Task's row).

The one spelling of each; every module, template and script uses these (the
admin hands them to ``live.js`` with ``json_script``). No imports from the
package, so every layer may use them.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Status(models.TextChoices):
    """A task's status as every replica reads it (``TaskState.status``)."""

    RUNNING = "running", _("running")
    # Not running, with a run requested for a worker (request_run()).
    REQUESTED = "requested", _("requested")
    CANCEL_REQUESTED = "cancel requested", _("cancel requested")
    # The row says running, but the holder went silent past its ttl.
    STALE = "stale", _("stale")
    # An operator paused it: workers start nothing of it until the unpause.
    PAUSED = "paused", _("paused")
    IDLE = "idle", _("idle")
    # Registered, and never claimed: no run has started yet (no row, or only
    # the row a schedule made).
    NEVER_RUN = "never run", _("never run")

    @property
    def slug(self) -> str:
        """The CSS class suffix of its badge: ``cancel-requested``."""
        return self.value.replace(" ", "-")


# The classes here are alike on purpose: each names the values of its own column.
class Outcome(models.TextChoices):
    """How a run ended."""

    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")
    # The holder stopped renewing (killed, paused, cut off) and the lease was
    # taken over or noticed stale.
    LOST = "lost", _("lost")
    RELEASED_BY_OPERATOR = "released-by-operator", _("released by operator")
    # Stopped by a worker's graceful shutdown (SIGTERM), at a check() or update().
    INTERRUPTED = "interrupted", _("interrupted")
    # Ran past its timeout (@background_task(timeout=S)): told at a check() or
    # update(), or ended by its worker when it did not stop within the grace.
    TIMED_OUT = "timed-out", _("timed out")


class Trigger(models.TextChoices):
    """What started a run (``TaskRun.trigger``)."""

    MANUAL = "manual", _("manual")
    REQUEST = "request", _("request")
    SCHEDULE = "schedule", _("schedule")
    RESUME = "resume", _("resume")
    RETRY = "retry", _("retry")


class WorkerRunStatus(models.TextChoices):
    """What became of a run that a worker last reported running
    (``WorkerRun.status``): only a live worker's report is taken as it is; a
    silent worker's runs are described by their lease rows."""

    # The worker is live (it beat within its ttl) and says it runs it.
    RUNNING = "running", _("running")
    # The worker is silent, but the run's lease is not stale yet: its own
    # heartbeat still renews it, or its ttl has not passed since the last one.
    HELD = "held", _("lease held")
    # The worker is silent and so is the lease: the next worker's poll takes
    # it over (resume, retry) or records it lost.
    STALE = "stale", _("lease stale")
    # Claimed again since, by another owner: the lease is no longer the worker's.
    TAKEN_OVER = "taken over", _("taken over")
    # The worker's claim ended (its outcome says how), and nobody claimed it since.
    ENDED = "ended", _("ended")


class QueueStatus(models.TextChoices):
    """A Django Task's status as its row stores it (``QueuedTask.status``):
    the values of Django's ``TaskResultStatus``, which results are built
    with. The queue's SQL (:mod:`django_bgtasks.db`) has them filled
    in from here."""

    READY = "READY", _("ready")
    RUNNING = "RUNNING", _("running")
    SUCCESSFUL = "SUCCESSFUL", _("successful")
    FAILED = "FAILED", _("failed")


class FlowLimit(models.TextChoices):
    """What a flow slot (``FlowSlot.kind``) limits: how many tasks of a key
    run at once (``@task(concurrency=N)``), or how many start in a window
    (``@task(rate_limit="N/s")``)."""

    CONCURRENCY = "concurrency", _("concurrency")
    RATE = "rate", _("rate")


# What a holder may record when it releases its own lease; the others are
# written by the database (lost) or by an operator (released-by-operator).
HOLDER_OUTCOMES = frozenset(
    {
        Outcome.SUCCEEDED,
        Outcome.FAILED,
        Outcome.CANCELLED,
        Outcome.INTERRUPTED,
        Outcome.TIMED_OUT,
    }
)
# A run that ended so, of a resumable task, is owed another attempt.
RESUMABLE_OUTCOMES = frozenset({Outcome.LOST, Outcome.INTERRUPTED})
# A run that ended so is retried after its delay while attempts remain.
RETRIED_OUTCOMES = frozenset({Outcome.FAILED, Outcome.TIMED_OUT})
