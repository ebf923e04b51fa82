"""``bgtasks run``: following a run that this process started, in the foreground.

The claim is :func:`django_bgtasks.operations.writes.start`'s, and the command words
its refusals. Here: the progress bar until the run ends, the first Ctrl-C (or
SIGTERM) as a cancel request for this run, the second as giving its lease up,
and the run's end in words, or as a ``CommandError`` when it did not succeed.
"""

from __future__ import annotations

import json
import threading

from django.core.management.base import CommandError, OutputWrapper
from django.core.management.color import Style

from django_bgtasks.choices import Outcome
from django_bgtasks.core.runner import RunningLease
from django_bgtasks.core.states import TaskState
from django_bgtasks.exceptions import LeaseLost, TaskCancelled
from django_bgtasks.management.terminal import ProgressBar, printable
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import display
from django_bgtasks.operations import writes as operations

# How often `run` reads the task's state to redraw its progress bar.
RUN_POLL_SECONDS = 0.2


def follow(
    running: RunningLease,
    stdout: OutputWrapper,
    style: Style,
    stop: threading.Event,
    interrupts: list[int],
) -> TaskState | None:
    """Draw ``running``'s progress until it ends, and return the task's last
    state. ``stop`` is set on each interrupt, counted in ``interrupts[0]``
    (:func:`~django_bgtasks.management.terminal.stop_on_signals`)."""
    bar = ProgressBar(stdout, style)
    cancel_sent = False
    while not running.wait(RUN_POLL_SECONDS):
        if stop.is_set():
            stop.clear()
            if interrupts[0] >= 2:
                bar.close()
                _abandon(running)
            if not cancel_sent:
                cancel_sent = True
                # This run only, never one that took over since.
                operations.request_cancel(running.name, token=running.token)
                bar.close()
                stdout.write(
                    style.WARNING(
                        "Asked the task to stop; waiting for it. Ctrl-C again abandons it."
                    )
                )
                bar.drawn = ""
        state = BackgroundTask.objects.get_state(running.name)
        if state is not None and state.token == running.token:
            bar.draw(state)
    final = BackgroundTask.objects.get_state(running.name)
    if final is not None and final.token == running.token:
        bar.draw(final)
    bar.close()
    return final


def _abandon(running: RunningLease) -> None:
    # Release our own claim, fenced by its token, so that the task does
    # not read as running for a ttl after this process exits.
    BackgroundTask.objects.release(
        running.name,
        running.owner,
        token=running.token,
        outcome=Outcome.CANCELLED,
        error="abandoned: interrupted twice at the terminal",
    )
    raise CommandError(
        f"Abandoned {running.name!r} (token {running.token}); its lease is released."
    )


def report(
    stdout: OutputWrapper, style: Style, running: RunningLease, state: TaskState | None
) -> None:
    """Say how the run ended: success and its result, or a ``CommandError``."""
    name, token, exception = running.name, running.token, running.exception
    took = display.seconds(state.duration) if state is not None else ""
    if exception is None:
        stdout.write(style.SUCCESS(f"{name!r} succeeded (token {token}) in {took}."))
        if running.result is not None:
            result = json.dumps(running.result, ensure_ascii=False, default=repr)
            stdout.write("result: " + printable(result))
        return
    if isinstance(exception, TaskCancelled):
        raise CommandError(f"{name!r} was cancelled (token {token}) after {took}.")
    if isinstance(exception, LeaseLost):
        raise CommandError(f"{name!r} lost its lease (token {token}): {exception.reason}")
    raise CommandError(
        f"{name!r} failed (token {token}): {exception!r}. "
        f"The traceback is stored: manage.py bgtasks show {name}"
    )
