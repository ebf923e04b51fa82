"""What the ``bgtasks`` read subcommands print: ``list``, ``show`` and ``watch``.

The command (``management/commands/bgtasks.py``) parses the arguments and
handles ``--json`` and errors; these functions lay the states out as text,
with the cells and tables of :mod:`django_bgtasks.management.terminal`.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Collection, Iterable, Sequence

from django.core.management.base import OutputWrapper
from django.core.management.color import Style
from django.db import InterfaceError, OperationalError, close_old_connections
from django.utils import timezone

from django_bgtasks.choices import Status
from django_bgtasks.core.states import TaskState, run_duration
from django_bgtasks.management.interrupts import stop_on_signals
from django_bgtasks.management.terminal import (
    CLEAR_SCREEN,
    Cell,
    outcome_cell,
    plain,
    printable,
    status_cell,
    styled,
    write_table,
)
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun
from django_bgtasks.operations import display, queued, queues
from django_bgtasks.queue.manager import FAILED, RUNNING, SUCCESSFUL

RECENT_RUNS = 10
TASK_COLUMNS = (
    "NAME",
    "STATUS",
    "PROGRESS",
    "OWNER",
    "TOKEN",
    "OUTCOME",
    "HEARTBEAT",
    "STARTED",
    "FINISHED",
    "DURATION",
    "NEXT RUN",
)
RUN_COLUMNS = (
    "TOKEN",
    "OUTCOME",
    "TRIGGER",
    "ATTEMPT",
    "OWNER",
    "STARTED",
    "FINISHED",
    "DURATION",
)


def write_tasks(stdout: OutputWrapper, style: Style, states: Sequence[TaskState]) -> None:
    """One row per task, in ``TASK_COLUMNS``."""
    rows: list[list[Cell]] = [
        [
            state.name,
            status_cell(state, style),
            display.progress_label(state),
            state.owner,
            str(state.token),
            outcome_cell(state.outcome, style),
            display.ago(state.heartbeat_age),
            *_times(state.started_at, state.finished_at, state.duration),
            display.when(state.next_run_at),
        ]
        for state in states
    ]
    write_table(stdout, style, TASK_COLUMNS, rows)


def _times(
    started: dt.datetime | None, finished: dt.datetime | None, took: float | None
) -> list[Cell]:
    """The STARTED, FINISHED and DURATION cells of a task or a run."""
    return [display.when(started), display.when(finished), display.seconds(took)]


def show_list(
    stdout: OutputWrapper, style: Style, states: Sequence[TaskState], registered: Iterable[str]
) -> None:
    """``list``: one row per task (``operations.task_states()``: the registered
    ones that never ran too, as ``never run``), then those named once more."""
    if states:
        write_tasks(stdout, style, states)
    known = set(registered)
    never_run = [
        state.name for state in states if state.status == Status.NEVER_RUN and state.name in known
    ]
    if never_run:
        stdout.write(f"Registered, never run: {', '.join(never_run)}")
    if not states:
        stdout.write("No background task has run, and none is registered.")


# The labels of ``show``, padded to the longest of them all, so that the
# values line up alike whichever fields a task shows.
SHOW_WIDTH = len("cancel requested")


def task_fields(state: TaskState, style: Style) -> list[tuple[str, Cell]]:
    """What is true of the task now, and nothing else. Always its name,
    status, token and ttl. While its lease is held (running, or stale): the
    holder, its last heartbeat and whether a cancel was asked for, and no
    finish or outcome. Once the run ended: when, and how, and no holder,
    heartbeat or cancel request (a cancel asked for during a run that then
    ended is history, not the task's state). The rest only when there is one:
    progress, start and duration, the run's trigger and attempt, a pending
    request, the next slot."""
    held = state.held
    fields: list[tuple[str, Cell]] = [
        ("name", state.name),
        ("status", status_cell(state, style)),
        ("progress", display.progress_label(state)),
        ("owner", state.owner if held else ""),
        ("token", str(state.token)),
        ("ttl", f"{state.ttl:g} s"),
        ("last heartbeat", display.ago(state.heartbeat_age) if held else ""),
        ("started", display.when(state.started_at)),
        ("finished", "" if held else display.when(state.finished_at)),
        ("duration", display.seconds(state.duration)),
        ("cancel requested", ("yes" if state.cancel_requested else "no") if held else ""),
        ("outcome", "" if held else outcome_cell(state.outcome, style)),
        ("trigger", state.trigger),
        ("attempt", str(state.attempt) if state.attempt else ""),
        ("requested", display.when(state.requested_at)),
        ("next run", display.when(state.next_run_at)),
    ]
    return [(label, cell) for label, cell in fields if plain(cell)]


def show_task(stdout: OutputWrapper, style: Style, state: TaskState) -> None:
    """``show``: one task's fields (:func:`task_fields`), its error and
    value, and its recent runs."""
    for label, cell in task_fields(state, style):
        stdout.write(f"{label.ljust(SHOW_WIDTH)}  {styled(cell)}")
    if state.error:
        stdout.write("error:")
        stdout.write(printable(state.error.rstrip()))
    if state.value is not None:
        stdout.write("value:")
        stdout.write(
            printable(json.dumps(state.value, indent=2, ensure_ascii=False, sort_keys=True))
        )
    if state.result is not None:
        stdout.write("result:")
        stdout.write(
            printable(json.dumps(state.result, indent=2, ensure_ascii=False, sort_keys=True))
        )
    elif state.result_note:
        stdout.write(f"result: {printable(state.result_note)}")
    runs = list(TaskRun.objects.for_task(state.name)[:RECENT_RUNS])
    if runs:
        stdout.write(f"recent runs (newest first, up to {RECENT_RUNS}):")
        rows: list[list[Cell]] = [
            [
                str(run.token),
                outcome_cell(run.outcome, style),
                run.trigger,
                str(run.attempt),
                run.owner,
                *_times(run.started_at, run.finished_at, run.duration),
            ]
            for run in runs
        ]
        write_table(stdout, style, RUN_COLUMNS, rows)


def watch(
    stdout: OutputWrapper,
    stderr: OutputWrapper,
    style: Style,
    *,
    interval: float,
    iterations: int | None,
    clear: bool,
) -> None:
    """``watch``: the task table every ``interval`` seconds, ``iterations``
    times or until Ctrl-C or SIGTERM; ``clear`` clears the screen before each."""
    stop = threading.Event()
    shown = 0
    with stop_on_signals(stop):
        while not stop.is_set():
            # A long-lived loop: drop a connection the database closed or
            # that outlived CONN_MAX_AGE, as a request would.
            close_old_connections()
            try:
                states = BackgroundTask.objects.list_states()
            except (OperationalError, InterfaceError) as exc:
                stderr.write(f"Database unreachable, retrying: {exc}")
                stop.wait(interval)
                continue
            if clear:
                stdout.write(CLEAR_SCREEN, ending="")
            now = timezone.localtime().strftime("%Y-%m-%d %H:%M:%S")
            running = sum(state.running for state in states)
            stdout.write(
                f"{now}  {len(states)} task(s), {running} running. "
                f"Every {interval:g} s; Ctrl-C to stop."
            )
            if states:
                write_tasks(stdout, style, states)
            if not clear:
                stdout.write("")
            shown += 1
            if iterations is not None and shown >= iterations:
                break
            stop.wait(interval)
    close_old_connections()


QUEUED_COLUMNS = (
    "ID",
    "TASK",
    "STATUS",
    "QUEUE",
    "PRIORITY",
    "ATTEMPTS",
    "PROGRESS",
    "WORKER",
    "STARTED",
    "FINISHED",
    "DURATION",
)


def _queued_status(row: QueuedTask, style: Style, paused: Collection[str]) -> Cell:
    paint = {SUCCESSFUL: style.SUCCESS, FAILED: style.ERROR, RUNNING: style.WARNING}
    label = queued.status_label(row, paused)
    painter = paint.get(row.status)
    return (label, painter) if painter is not None else label


def _queued_progress(row: QueuedTask) -> str:
    progress = row.progress
    if isinstance(progress, dict) and isinstance(progress.get("done"), int | float):
        total = progress.get("total")
        return (
            f"{progress['done']}/{total}"
            if isinstance(total, int | float)
            else str(progress["done"])
        )
    return "" if progress is None else printable(json.dumps(progress))[:30]


def show_queued_list(
    stdout: OutputWrapper,
    style: Style,
    rows: Sequence[QueuedTask],
    paused: Collection[str],
    *,
    heading: str = "Django Tasks (queued, running, then the most recent):",
) -> None:
    """``list``'s second table: the queued and recent Django Tasks (if any),
    or those a filter matches under its ``heading``; ``paused``: the paused
    queues' names."""
    if not rows:
        return
    stdout.write("")
    stdout.write(heading)
    table: list[list[Cell]] = [
        [
            str(row.uuid),
            row.task_path,
            _queued_status(row, style, paused),
            row.queue_name,
            str(row.priority),
            f"{row.attempts}/{row.max_attempts}",
            _queued_progress(row),
            row.owner if row.status == RUNNING else "",
            *_times(
                row.started_at, row.finished_at, run_duration(row.started_at, row.finished_at)
            ),
        ]
        for row in rows
    ]
    write_table(stdout, style, QUEUED_COLUMNS, table)


def show_queued(
    stdout: OutputWrapper, style: Style, row: QueuedTask, paused: Collection[str]
) -> None:
    """``show ID``: one Django Task's fields and its errors, with tracebacks
    (``paused``: the paused queues' names)."""
    fields: list[tuple[str, Cell]] = [
        ("id", str(row.uuid)),
        ("task", row.task_path),
        ("status", _queued_status(row, style, paused)),
        ("backend", row.backend),
        ("queue", row.queue_name),
        ("priority", str(row.priority)),
        ("attempts", f"{row.attempts} of {row.max_attempts}"),
        ("progress", _queued_progress(row)),
        # The worker running it now; ``workers`` are all that ever ran it.
        ("worker", row.owner if row.status == RUNNING else ""),
        ("workers", ", ".join(row.worker_ids or [])),
        ("token", str(row.token)),
        ("enqueued", display.when(row.enqueued_at)),
        ("run after", display.when(row.run_after)),
        ("started", display.when(row.started_at)),
        ("finished", display.when(row.finished_at)),
        ("duration", display.seconds(run_duration(row.started_at, row.finished_at))),
    ]
    # Only what there is, aligned alike for every task.
    width = max(len(label) for label, _cell in fields)
    for label, cell in fields:
        if plain(cell):
            stdout.write(f"{label.ljust(width)}  {styled(cell)}")
    for number, error in enumerate(row.errors or [], start=1):
        stdout.write("")
        stdout.write(
            style.ERROR(f"error {number}: {printable(error.get('exception_class_path', ''))}")
        )
        stdout.write(printable(str(error.get("traceback", ""))))


QUEUE_COLUMNS = ("QUEUE", "PAUSED", "READY", "RUNNING", "SUCCESSFUL", "FAILED")


def show_queues(stdout: OutputWrapper, style: Style, found: Sequence[queues.Queue]) -> None:
    """``queues``: each queue, paused since when, and its tasks by status
    ("10,000+": a count that stopped at its cap, or a lower bound)."""
    if not found:
        stdout.write("No Django Tasks queue has tasks or a pause.")
        return
    rows: list[list[Cell]] = [
        [
            queue.name,
            (f"since {display.when(queue.paused_at)}", style.WARNING) if queue.paused else "no",
            *(str(queue.counts[status]) for status in queues.STATUSES),
        ]
        for queue in found
    ]
    write_table(stdout, style, QUEUE_COLUMNS, rows)
