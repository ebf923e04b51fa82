"""Runs that went wrong: a lost or interrupted run resumed or retried, a
failed or timed-out one retried after its delay, and a silent holder that nothing is owed
for recorded as ``lost``.

Each claim here is one compare-and-set on the row's token (``expect``), so
only one worker rescues a run, and the rescued run's higher token fences off
the holder that went silent.
"""

from __future__ import annotations

import logging
from typing import Any

from django_bgtasks.background.functions import BackgroundTaskFunction
from django_bgtasks.choices import RESUMABLE_OUTCOMES, RETRIED_OUTCOMES, Outcome
from django_bgtasks.core.states import DueRow, WorkClaim
from django_bgtasks.models import BackgroundTask

logger = logging.getLogger("django_bgtasks.worker")


def owes_again(task: BackgroundTaskFunction[..., Any], row: DueRow) -> bool:
    """A lost run is owed another attempt while attempts remain (resumed from
    its checkpoint for a resumable task, else retried afresh); an interrupted
    one, of a resumable task, always (a graceful stop uses no attempt)."""
    if row.stale:
        return row.attempt < task.max_attempts
    if row.outcome == Outcome.INTERRUPTED:
        return task.resume
    return row.outcome in RESUMABLE_OUTCOMES and row.attempt < task.max_attempts


def retry_due(task: BackgroundTaskFunction[..., Any], row: DueRow) -> bool:
    """A failed (or timed-out) run, attempts left, and its (doubling) delay
    passed by the database's clock; never a run that failed only because its
    return value could not be stored (its work is done)."""
    return (
        not row.stale
        and row.outcome in RETRIED_OUTCOMES
        and not row.result_not_stored
        and row.attempt < task.max_attempts
        and row.finished_age is not None
        and row.finished_age >= task.retry_delay_for(row.attempt)
    )


def claim_again(
    task: BackgroundTaskFunction[..., Any], row: DueRow, owner: str
) -> WorkClaim | None:
    """Claim the run :func:`owes_again`: resumed, or retried afresh."""
    return BackgroundTask.objects.work.claim_resume(
        row.name,
        owner,
        task.effective_ttl,
        expect=row.token,
        max_attempts=task.max_attempts,
        resume=task.resume,
    )


# Alike claim_again() on purpose: each calls its own compare-and-set (a retry also
# waits out its delay), with the arguments every claim of a due row takes.
def claim_retry(
    task: BackgroundTaskFunction[..., Any], row: DueRow, owner: str
) -> WorkClaim | None:
    """Claim the failed run whose :func:`retry_due`."""
    return BackgroundTask.objects.work.claim_retry(
        row.name,
        owner,
        task.effective_ttl,
        expect=row.token,
        max_attempts=task.max_attempts,
        delay=task.retry_delay_for(row.attempt),
        resume=task.resume,
    )


def record_lost(task: BackgroundTaskFunction[..., Any], row: DueRow) -> None:
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
