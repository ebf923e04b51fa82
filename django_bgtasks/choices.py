"""The names of every state: ``Status`` (of a task) and ``Outcome`` (of a run).

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
    CANCEL_REQUESTED = "cancel requested", _("cancel requested")
    # The row says running, but the holder went silent past its ttl.
    STALE = "stale", _("stale")
    IDLE = "idle", _("idle")

    @property
    def slug(self) -> str:
        """The CSS class suffix of its badge: ``cancel-requested``."""
        return self.value.replace(" ", "-")


class Outcome(models.TextChoices):
    """How a run ended."""

    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")
    # The holder stopped renewing (killed, paused, cut off) and the lease was
    # taken over or noticed stale.
    LOST = "lost", _("lost")
    RELEASED_BY_OPERATOR = "released-by-operator", _("released by operator")


# What a holder may record when it releases its own lease; the others are
# written by the database (lost) or by an operator (released-by-operator).
HOLDER_OUTCOMES = frozenset({Outcome.SUCCEEDED, Outcome.FAILED, Outcome.CANCELLED})
