"""``bgtasks pause`` and ``bgtasks unpause``: of a background task (``NAME``)
or of a Django Tasks queue (``--queue QUEUE``), through
:mod:`django_bgtasks.operations.pause`, whose answers are worded here. Bad
input (both or neither of ``NAME`` and ``--queue``, a malformed name), an
unknown task and a queue no ``LeaseBackend`` has are a ``CommandError``
(exit status 1), with nothing written."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, OutputWrapper
from django.core.management.color import Style

from django_bgtasks.operations import pause as pausing
from django_bgtasks.operations.writes import NotRegistered


def handle_pause(command: BaseCommand, *, name: str | None, queue: str | None, **_: Any) -> None:
    """The command's ``handle_pause``."""
    pause(command.stdout, command.style, name=name, queue=queue)


def handle_unpause(command: BaseCommand, *, name: str | None, queue: str | None, **_: Any) -> None:
    """The command's ``handle_unpause``."""
    unpause(command.stdout, command.style, name=name, queue=queue)


def pause(stdout: OutputWrapper, style: Style, *, name: str | None, queue: str | None) -> None:
    """Pause, and say what became of it."""
    try:
        result = pausing.pause(name, queue=queue)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    if isinstance(result, NotRegistered):
        raise CommandError(
            f"No task named {name!r} is registered here or reported by a worker; "
            f"registered: {', '.join(result.registered) or 'none'}."
        )
    if isinstance(result, pausing.UnknownQueue):
        raise CommandError(
            f"No LeaseBackend in TASKS has the queue {result.queue!r}; their queues: "
            f"{', '.join(result.queues) or 'none'}."
        )
    done = "Paused" if result.changed else "Already paused:"
    if isinstance(result, pausing.QueuePaused):
        stdout.write(
            style.SUCCESS(
                f"{done} queue {result.queue!r}: no worker claims its tasks until "
                f"'bgtasks unpause --queue {result.queue}'; running ones finish."
            )
        )
        return
    state = result.state
    running = " Its run going now finishes as usual." if state.running else ""
    stdout.write(
        style.SUCCESS(
            f"{done} task {state.name!r}: workers start nothing of it until "
            f"'bgtasks unpause {state.name}' (requests are kept, schedule slots "
            f"skipped).{running}"
        )
    )


def unpause(stdout: OutputWrapper, style: Style, *, name: str | None, queue: str | None) -> None:
    """Unpause, and say whether it was paused."""
    try:
        result = pausing.unpause(name, queue=queue)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    if isinstance(result, pausing.QueueUnpaused):
        what = f"queue {result.queue!r}"
    else:
        what = f"task {result.name!r}"
    if not result.changed:
        stdout.write(f"The {what} was not paused; nothing to do.")
        return
    stdout.write(style.SUCCESS(f"Unpaused {what}."))
