"""``bgtasks run``: a run that this process starts, followed in the foreground.

The claim is :func:`django_bgtasks.operations.writes.start`'s, and
:func:`run` words its refusals. Here: the progress bar until the run ends, the
first Ctrl-C (or SIGTERM) as a cancel request for this run, the second as
giving its lease up, and the run's end in words, or as a ``CommandError`` when
it did not succeed.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.core.management.color import Style

from django_bgtasks.choices import Outcome
from django_bgtasks.conf import EXECUTOR_THREAD
from django_bgtasks.core.runner import RunningLease
from django_bgtasks.core.states import TaskState
from django_bgtasks.exceptions import LeaseLost, TaskCancelled
from django_bgtasks.management.interrupts import stop_on_signals
from django_bgtasks.management.terminal import ProgressBar, printable
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import display, writes

# How often `run` reads the task's state to redraw its progress bar.
RUN_POLL_SECONDS = 0.2


def run(
    stdout: OutputWrapper,
    style: Style,
    *,
    name: str,
    ttl: float | None,
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> None:
    """``run NAME``: claim ``name`` here (with ``args`` and ``kwargs``, checked
    by ``writes.start()`` as for every surface), follow it to its end,
    and say how it ended."""
    stop, interrupts = threading.Event(), [0]
    # Signals are handled from before the claim: an interrupt just after
    # it is a cancel request like any other, never a KeyboardInterrupt
    # that leaves the lease held.
    with stop_on_signals(stop, interrupts):
        running = _start(name, ttl, args, kwargs)
        stdout.write(
            f"Running {name!r} here as {running.owner}, token {running.token}. "
            "Ctrl-C asks it to stop."
        )
        final = _follow(running, stdout, style, stop, interrupts)
    _report(stdout, style, running, final)


def _start(
    name: str, ttl: float | None, args: list[Any] | None, kwargs: dict[str, Any] | None
) -> RunningLease:
    try:
        # Here, in the foreground, whatever BGTASKS_EXECUTOR says.
        result = writes.start(name, args=args, kwargs=kwargs, ttl=ttl, executor=EXECUTOR_THREAD)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    if isinstance(result, writes.NotRegistered):
        known = ", ".join(result.registered) or "none"
        raise CommandError(f"No background task is registered as {name!r} (registered: {known}).")
    if isinstance(result, writes.AlreadyHeld):
        held = result.state
        holder = f"{held.owner} (token {held.token})" if held else "another owner"
        raise CommandError(f"Task {name!r} is already running on {holder}.")
    assert isinstance(result, writes.Started)  # not a request: executor "thread"
    return result.running


def _follow(
    running: RunningLease,
    stdout: OutputWrapper,
    style: Style,
    stop: threading.Event,
    interrupts: list[int],
) -> TaskState | None:
    """Draw ``running``'s progress until it ends, and return the task's last
    state. ``stop`` is set on each interrupt, counted in ``interrupts[0]``
    (:func:`~django_bgtasks.management.interrupts.stop_on_signals`)."""
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
                writes.request_cancel(running.name, token=running.token)
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


def _report(
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
