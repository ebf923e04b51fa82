"""``manage.py bgtasks``: see, start, stop and unstick background tasks.

Subcommands: ``list``, ``show NAME``, ``run NAME``, ``release NAME --force``,
``cancel NAME``, ``prune`` and ``watch``. Each reads and writes through
``BackgroundTask.objects`` and the task registry, as the admin and the JSON
API do, so it gives the same answer on every replica. ``--json`` (on ``list``
and ``show``) prints only JSON, in the API's shape (``TaskState.as_json()``).
Failures raise ``CommandError``: a message on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import InterfaceError, OperationalError, close_old_connections
from django.utils import timezone

from ... import display, terminal
from ...choices import Outcome
from ...conf import conf
from ...exceptions import LeaseLost, TaskCancelled, UnknownTask
from ...models import BackgroundTask, TaskRun
from ...states import TaskState
from ...tasks import get_task, registered_tasks
from ...terminal import (
    Cell,
    ProgressBar,
    outcome_cell,
    printable,
    status_cell,
    stop_on_signals,
    styled,
    write_json,
    write_table,
)
from ...validation import heartbeat_interval

# How often `run` reads the task's state to redraw its progress bar.
RUN_POLL_SECONDS = 0.2
RECENT_RUNS = 10
# Bounds for --days and --interval: beyond them the date arithmetic and the
# wait overflow (and neither makes sense for history or a refresh).
MAX_HISTORY_DAYS = 36500
MAX_WATCH_INTERVAL = 86400.0
COLUMNS = (
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
)


class Command(BaseCommand):
    """``manage.py bgtasks``: the operator's command line."""

    help = (
        "See, start, stop and unstick background tasks: list, show, run, release, cancel, "
        "prune, watch. Every replica gives the same answers: the state is the database's."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # Django's colour options belong to the command, before the
        # subcommand; repeat them on each subcommand so that
        # `bgtasks list --no-color` works too. SUPPRESS: only when given.
        colour = CommandParser(add_help=False)
        colour.add_argument("--no-color", action="store_true", default=argparse.SUPPRESS)
        colour.add_argument("--force-color", action="store_true", default=argparse.SUPPRESS)

        subcommands = parser.add_subparsers(
            dest="subcommand", required=True, metavar="SUBCOMMAND", title="subcommands"
        )

        list_ = subcommands.add_parser("list", parents=[colour], help="Every task's state.")
        self._json_option(list_)

        show = subcommands.add_parser("show", parents=[colour], help="One task, and its runs.")
        show.add_argument("name", help="The task's name.")
        self._json_option(show)

        run = subcommands.add_parser(
            "run",
            parents=[colour],
            help="Run a registered task here, in the foreground, under its lease. "
            "Ctrl-C asks it to stop; a second Ctrl-C abandons it.",
        )
        run.add_argument("name", help="The registered task's name.")
        run.add_argument(
            "--ttl",
            type=float,
            default=None,
            help="Lease duration in seconds for this run (default: the task's own, "
            "else BGTASKS_TTL).",
        )

        release = subcommands.add_parser(
            "release",
            parents=[colour],
            help="End a task's lease whoever holds it (for a holder that died or hangs).",
        )
        release.add_argument("name", help="The task's name.")
        release.add_argument(
            "--force",
            action="store_true",
            help="Really end the holder's lease. Without it, only say who holds it.",
        )
        release.add_argument(
            "--token",
            type=int,
            default=None,
            help="Release only if this claim (fencing token) still holds the lease "
            "(default: the claim seen when the command starts).",
        )

        cancel = subcommands.add_parser(
            "cancel", parents=[colour], help="Ask a task's holder to stop."
        )
        cancel.add_argument("name", help="The task's name.")
        cancel.add_argument(
            "--token",
            type=int,
            default=None,
            help="Cancel only if this claim (fencing token) still holds the lease "
            "(default: the claim seen when the command starts).",
        )

        prune = subcommands.add_parser(
            "prune",
            parents=[colour],
            help="Record silent holders as lost, and delete old run history "
            "(each task's newest run is kept).",
        )
        prune.add_argument(
            "--days",
            type=float,
            default=None,
            help="Keep this many days of run history (default: BGTASKS_HISTORY_DAYS).",
        )
        prune.add_argument(
            "--dry-run", action="store_true", help="Only say what would be changed."
        )

        watch = subcommands.add_parser(
            "watch", parents=[colour], help="A table of every task, refreshed until Ctrl-C."
        )
        watch.add_argument(
            "--interval",
            type=float,
            default=1.0,
            help="Seconds between refreshes (default: %(default)r).",
        )
        watch.add_argument(
            "--iterations",
            type=int,
            default=None,
            help="Stop after this many tables (default: run until Ctrl-C or SIGTERM).",
        )

    @staticmethod
    def _json_option(parser: CommandParser) -> None:
        parser.add_argument(
            "--json",
            action="store_true",
            dest="json_output",
            help="Print only JSON: TaskState.as_json(), the JSON API's shape.",
        )

    def handle(self, *args: Any, subcommand: str, **options: Any) -> None:
        handler: Callable[..., None] = getattr(self, f"handle_{subcommand}")
        handler(**options)

    # --- reads -------------------------------------------------------------------

    def handle_list(self, *, json_output: bool, **_: Any) -> None:
        states = BackgroundTask.objects.list_states()
        if json_output:
            self._json({"tasks": [state.as_json() for state in states]})
            return
        if states:
            self._table(
                COLUMNS,
                [self._row(state) for state in states],
            )
        seen = {state.name for state in states}
        never_run = [name for name in registered_tasks() if name not in seen]
        if never_run:
            self.stdout.write(f"Registered, never run: {', '.join(never_run)}")
        if not states and not never_run:
            self.stdout.write("No background task has run, and none is registered.")

    def handle_show(self, *, name: str, json_output: bool, **_: Any) -> None:
        state = self._state(name)
        if json_output:
            self._json(state.as_json())
            return
        pairs: list[tuple[str, Cell]] = [
            ("name", state.name),
            ("status", self._status(state)),
            ("progress", display.progress_label(state)),
            ("owner", state.owner),
            ("token", str(state.token)),
            ("ttl", f"{state.ttl:g} s"),
            ("last heartbeat", display.ago(state.heartbeat_age)),
            ("started", display.when(state.started_at)),
            ("finished", display.when(state.finished_at)),
            ("duration", display.seconds(state.duration)),
            ("cancel requested", "yes" if state.cancel_requested else "no"),
            ("outcome", self._outcome(state.outcome)),
        ]
        width = max(len(label) for label, _cell in pairs)
        for label, cell in pairs:
            self.stdout.write(f"{label.ljust(width)}  {styled(cell)}")
        if state.error:
            self.stdout.write("error:")
            self.stdout.write(printable(state.error.rstrip()))
        self.stdout.write("value:")
        self.stdout.write(
            printable(json.dumps(state.value, indent=2, ensure_ascii=False, sort_keys=True))
        )
        runs = list(TaskRun.objects.for_task(state.name)[:RECENT_RUNS])
        if runs:
            self.stdout.write(f"recent runs (newest first, up to {RECENT_RUNS}):")
            self._table(
                ["TOKEN", "OUTCOME", "OWNER", "STARTED", "FINISHED", "DURATION"],
                [
                    [
                        str(run.token),
                        self._outcome(run.outcome),
                        run.owner,
                        display.when(run.started_at),
                        display.when(run.finished_at),
                        display.seconds(
                            (run.finished_at - run.started_at).total_seconds()
                            if run.started_at and run.finished_at
                            else None
                        ),
                    ]
                    for run in runs
                ],
            )

    # --- writes ------------------------------------------------------------------

    def handle_run(self, *, name: str, ttl: float | None, **_: Any) -> None:
        try:
            task = get_task(name)
            if ttl is not None:
                task = task.options(ttl=ttl)
        except UnknownTask:
            known = ", ".join(registered_tasks()) or "none"
            raise CommandError(
                f"No background task is registered as {name!r} (registered: {known})."
            ) from None
        except (ValueError, TypeError) as exc:
            raise CommandError(str(exc)) from None

        stop, interrupts = threading.Event(), [0]
        with stop_on_signals(stop, interrupts):
            running = task.start()
            if running is None:
                state = BackgroundTask.objects.get_state(name)
                holder = f"{state.owner} (token {state.token})" if state else "another owner"
                raise CommandError(f"Task {name!r} is already running on {holder}.")
            self.stdout.write(
                f"Running {name!r} here as {running.owner}, token {running.token}. "
                "Ctrl-C asks it to stop."
            )
            bar = ProgressBar(self.stdout, self.style)
            cancel_sent = False
            while not running.wait(RUN_POLL_SECONDS):
                if stop.is_set():
                    stop.clear()
                    if interrupts[0] >= 2:
                        bar.close()
                        self._abandon(running.name, running.owner, running.token)
                    if not cancel_sent:
                        cancel_sent = True
                        BackgroundTask.objects.request_cancel(name)
                        bar.close()
                        self.stdout.write(
                            self.style.WARNING(
                                "Asked the task to stop; waiting for it. Ctrl-C again abandons it."
                            )
                        )
                        bar.drawn = ""
                state = BackgroundTask.objects.get_state(name)
                if state is not None and state.token == running.token:
                    bar.draw(state)
            final = BackgroundTask.objects.get_state(name)
            if final is not None and final.token == running.token:
                bar.draw(final)
            bar.close()
        self._report(running.name, running.token, running.result, running.exception, final)

    def _abandon(self, name: str, owner: str, token: int) -> None:
        # Release our own claim, fenced by its token, so that the task does
        # not read as running for a ttl after this process exits.
        BackgroundTask.objects.release(
            name,
            owner,
            token=token,
            outcome=Outcome.CANCELLED,
            error="abandoned: interrupted twice at the terminal",
        )
        raise CommandError(f"Abandoned {name!r} (token {token}); its lease is released.")

    def _report(
        self,
        name: str,
        token: int,
        result: Any,
        exception: BaseException | None,
        state: TaskState | None,
    ) -> None:
        took = display.seconds(state.duration) if state is not None else ""
        if exception is None:
            self.stdout.write(self.style.SUCCESS(f"{name!r} succeeded (token {token}) in {took}."))
            if result is not None:
                self.stdout.write(
                    "result: " + printable(json.dumps(result, ensure_ascii=False, default=repr))
                )
            return
        if isinstance(exception, TaskCancelled):
            raise CommandError(f"{name!r} was cancelled (token {token}) after {took}.")
        if isinstance(exception, LeaseLost):
            raise CommandError(f"{name!r} lost its lease (token {token}): {exception.reason}")
        raise CommandError(
            f"{name!r} failed (token {token}): {exception!r}. "
            f"The traceback is stored: manage.py bgtasks show {name}"
        )

    def handle_release(self, *, name: str, force: bool, token: int | None, **_: Any) -> None:
        state = self._state(name)
        if not state.held:
            raise CommandError(f"Task {name!r} is not held; there is nothing to release.")
        if not force:
            hint = f", or ask it to stop: manage.py bgtasks cancel {name}" if state.running else ""
            raise CommandError(
                f"Task {name!r} is held by {state.owner} (token {state.token}, "
                f"{display.status_text(state)}). Releasing it ends that holder's lease: "
                f"pass --force to release it{hint}."
            )
        token = state.token if token is None else token
        _on_claim(BackgroundTask.objects.force_release, name, token, "released")
        self.stdout.write(
            self.style.SUCCESS(
                f"Released {name!r} (token {token}, held by {state.owner}). That holder can "
                "no longer renew it or write through it."
            )
        )

    def handle_cancel(self, *, name: str, token: int | None, **_: Any) -> None:
        state = self._state(name)
        if not state.running:
            raise CommandError(f"Task {name!r} is not running; there is nothing to cancel.")
        # Ask the run this command saw (or was told), never one that took over since.
        token = state.token if token is None else token
        _on_claim(BackgroundTask.objects.request_cancel, name, token, "cancelled")
        try:
            within = f" (heartbeats every {display.seconds(heartbeat_interval(state.ttl))})"
        except (ValueError, TypeError):
            within = ""
        self.stdout.write(
            self.style.SUCCESS(
                f"Asked {state.owner} to stop {name!r} (token {token}). It stops at "
                f"its next heartbeat or update{within}."
            )
        )

    def handle_prune(self, *, days: float | None, dry_run: bool, **_: Any) -> None:
        days = conf.HISTORY_DAYS if days is None else days
        if not (math.isfinite(days) and 0 <= days <= MAX_HISTORY_DAYS):
            raise CommandError(
                f"--days must be 0 or more, and at most {MAX_HISTORY_DAYS}, not {days:g}."
            )
        old_runs = TaskRun.objects.older_than(days)
        if dry_run:
            silent = [state.name for state in BackgroundTask.objects.list_states() if state.stale]
            names = f": {', '.join(silent)}" if silent else ""
            self.stdout.write(f"Would record {len(silent)} silent holder(s) as lost{names}.")
            self.stdout.write(
                f"Would delete {old_runs.count()} run(s) that finished more than {days:g} "
                "day(s) ago."
            )
            return
        expired = BackgroundTask.objects.expire_stale()
        deleted, _by_model = old_runs.delete()
        self.stdout.write(f"Recorded {expired} silent holder(s) as lost.")
        self.stdout.write(
            self.style.SUCCESS(
                f"Deleted {deleted} run(s) that finished more than {days:g} day(s) ago."
            )
        )

    def handle_watch(
        self, *, interval: float, iterations: int | None, no_color: bool = False, **_: Any
    ) -> None:
        if not 0 < interval <= MAX_WATCH_INTERVAL:
            raise CommandError(
                f"--interval must be above 0 and at most {MAX_WATCH_INTERVAL:g} seconds, "
                f"not {interval:g}."
            )
        if iterations is not None and iterations < 1:
            raise CommandError(f"--iterations must be 1 or more, not {iterations}.")
        clear = self.stdout.isatty() and not no_color
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
                    self.stderr.write(f"Database unreachable, retrying: {exc}")
                    stop.wait(interval)
                    continue
                if clear:
                    self.stdout.write(terminal.CLEAR_SCREEN, ending="")
                now = timezone.localtime().strftime("%Y-%m-%d %H:%M:%S")
                running = sum(state.running for state in states)
                self.stdout.write(
                    f"{now}  {len(states)} task(s), {running} running. "
                    f"Every {interval:g} s; Ctrl-C to stop."
                )
                if states:
                    self._table(
                        COLUMNS,
                        [self._row(state) for state in states],
                    )
                if not clear:
                    self.stdout.write("")
                shown += 1
                if iterations is not None and shown >= iterations:
                    break
                stop.wait(interval)
        close_old_connections()

    # --- helpers -----------------------------------------------------------------

    def _state(self, name: str) -> TaskState:
        try:
            state = BackgroundTask.objects.get_state(name)
        except (ValueError, TypeError) as exc:
            raise CommandError(str(exc)) from None
        if state is None:
            if name in registered_tasks():
                raise CommandError(f"Task {name!r} is registered but has never run.")
            raise CommandError(f"No task named {name!r} has run, and none is registered.")
        return state

    def _json(self, data: Any) -> None:
        write_json(self.stdout, data)

    def _status(self, state: TaskState) -> Cell:
        return status_cell(state, self.style)

    def _outcome(self, outcome: str) -> Cell:
        return outcome_cell(outcome, self.style)

    def _row(self, state: TaskState) -> list[Cell]:
        return [
            state.name,
            self._status(state),
            display.progress_label(state),
            state.owner,
            str(state.token),
            self._outcome(state.outcome),
            display.ago(state.heartbeat_age),
            display.when(state.started_at),
            display.when(state.finished_at),
            display.seconds(state.duration),
        ]

    def _table(self, headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> None:
        write_table(self.stdout, self.style, headers, rows)


def _on_claim(operation: Callable[..., bool], name: str, token: int, done: str) -> None:
    """Run an operator's write on claim ``token`` of ``name`` only; a
    ``CommandError`` when that claim no longer holds it (or on bad input)."""
    try:
        succeeded = operation(name, token=token)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    if not succeeded:
        raise CommandError(
            f"Task {name!r} was not {done}: token {token} no longer holds it "
            "(it finished, or another run took over)."
        )
