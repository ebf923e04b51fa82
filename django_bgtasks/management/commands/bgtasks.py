"""``manage.py bgtasks``: see, start, stop and unstick background tasks.

Subcommands: ``list``, ``show NAME``, ``run NAME``, ``release NAME --force``,
``cancel NAME``, ``prune``, ``watch``, and for workers ``worker``, ``workers``
and ``request NAME``. Each reads and writes through
``BackgroundTask.objects`` and the task registry, as the admin and the JSON
API do, so it gives the same answer on every replica. ``--json`` (on ``list``
and ``show``) prints only JSON, in the API's shape (``TaskState.as_json()``).
Failures raise ``CommandError``: a message on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from django.core.management.color import Style
from django.db import InterfaceError, OperationalError, close_old_connections
from django.utils import timezone

from ... import display
from ...conf import conf
from ...exceptions import LeaseLost, TaskCancelled, UnknownTask
from ...models import BackgroundTask, TaskRun
from ...states import TaskState
from ...tasks import get_task, registered_tasks
from ...validation import heartbeat_interval
from ...worker import Worker

# How often `run` reads the task's state to redraw its progress bar.
RUN_POLL_SECONDS = 0.2
# Without a terminal (logs, pipes), `run` writes a progress line when the
# percentage changes, and otherwise at most this often.
PLAIN_PROGRESS_EVERY = 5.0
RECENT_RUNS = 10
# Bounds for --days and --interval: beyond them the date arithmetic and the
# wait overflow (and neither makes sense for history or a refresh).
MAX_HISTORY_DAYS = 36500
MAX_WATCH_INTERVAL = 86400.0
# Home the cursor and clear the screen, as watch(1) does. Written only to a
# terminal and never with --no-color, so captured output has no escapes.
CLEAR_SCREEN = "\x1b[H\x1b[2J"

Cell = str | tuple[str, Callable[[str], str]]
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


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event, count: list[int] | None = None) -> Iterator[None]:
    """While the block runs, Ctrl-C (SIGINT) and SIGTERM set ``stop`` (and
    bump ``count[0]``) instead of raising wherever the program happens to be,
    so loops end between steps and clean up. Signals can only be caught in
    the main thread; elsewhere the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if count is not None:
            count[0] += 1
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class ProgressBar:
    """A progress line for ``run``, written through the command's stdout.

    On a terminal it is redrawn in place (``\\r``); otherwise (a log, a pipe, a
    test) it prints a line when the percentage changes. Django's own output
    wrapper is enough for this, so the app needs no progress-bar dependency.
    """

    WIDTH = 30

    def __init__(self, stdout: OutputWrapper, style: Style) -> None:
        self.stdout = stdout
        self.style = style
        self.tty = stdout.isatty()
        self.drawn = ""
        self.percent: int | None = None
        self.written_at = 0.0

    def line(self, state: TaskState) -> str:
        progress = state.progress
        if progress is None:
            bar = "[" + "?" * self.WIDTH + "]"
        else:
            filled = int(progress * self.WIDTH)
            bar = "[" + "#" * filled + "-" * (self.WIDTH - filled) + "]"
        parts = [bar, display.progress_label(state) or state.status]
        extra = _value_summary(state.value)
        if extra:
            parts.append(extra)
        return " ".join(parts)

    def draw(self, state: TaskState) -> None:
        text = self.line(state)
        if text == self.drawn:
            return
        if self.tty:
            # Pad with spaces over a longer previous line, rather than an
            # escape code, so that the output stays plain text.
            self.stdout.write("\r" + text.ljust(len(self.drawn)), ending="")
            self.stdout.flush()
        else:
            progress = state.progress
            percent = None if progress is None else int(progress * 100)
            now = time.monotonic()
            if percent == self.percent and now - self.written_at < PLAIN_PROGRESS_EVERY:
                return
            self.percent, self.written_at = percent, now
            self.stdout.write(text)
        self.drawn = text

    def close(self) -> None:
        if self.tty and self.drawn:
            self.stdout.write("")


# Errors and values are written by task code, which may echo anything (a file
# name, a remote server's message). Their control characters would be obeyed
# by the operator's terminal (clear the screen, retitle the window), so they
# are printed escaped, as JSON escapes them, which keeps --json valid JSON.
# Newlines and tabs stay: tracebacks are multi-line.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    return _CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _value_summary(value: Any, limit: int = 60) -> str:
    """The value's other keys (not done/total/progress), compact, for one line."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in ("done", "total", "progress")}
        if not value:
            return ""
    elif value is None:
        return ""
    text = _printable(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))
    return text if len(text) <= limit else text[: limit - 1] + "…"


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

        self._add_worker_arguments(subcommands, colour)

    def _add_worker_arguments(self, subcommands: Any, colour: CommandParser) -> None:
        worker = subcommands.add_parser(
            "worker",
            parents=[colour],
            help="Run requested, scheduled, resumed and retried runs until SIGTERM or Ctrl-C "
            "(any number of workers, on any number of hosts).",
        )
        worker.add_argument(
            "--task",
            action="append",
            dest="task_names",
            metavar="NAME",
            default=None,
            help="Run only this task (repeatable; default: every registered task).",
        )
        worker.add_argument(
            "--concurrency",
            type=_positive_int,
            default=4,
            help="Runs at once, each in its own thread (default: %(default)r).",
        )
        worker.add_argument(
            "--poll",
            type=_seconds(0.001, 3600),
            default=1.0,
            help="Seconds between looks for due work (default: %(default)r).",
        )
        worker.add_argument(
            "--grace",
            type=_seconds(0, 86400),
            default=30.0,
            help="On SIGTERM, seconds to wait for running tasks to stop (default: %(default)r).",
        )
        worker.add_argument(
            "--once",
            action="store_true",
            help="Do what is due now, wait for it to finish, and exit.",
        )

        workers = subcommands.add_parser(
            "workers", parents=[colour], help="Every worker, as it last reported itself."
        )
        self._json_option(workers)

        request = subcommands.add_parser(
            "request",
            parents=[colour],
            help="Ask a worker to run a registered task (one pending request per task).",
        )
        request.add_argument("name", help="The registered task's name.")
        request.add_argument(
            "--args",
            type=_json_list,
            default=[],
            help="Positional arguments, as a JSON list (default: none).",
        )
        request.add_argument(
            "--kwargs",
            type=_json_object,
            default={},
            help="Keyword arguments, as a JSON object (default: none).",
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
            ("last heartbeat", _ago(state.heartbeat_age)),
            ("started", display.when(state.started_at)),
            ("finished", display.when(state.finished_at)),
            ("duration", display.seconds(state.duration)),
            ("cancel requested", "yes" if state.cancel_requested else "no"),
            ("outcome", self._outcome(state.outcome)),
        ]
        width = max(len(label) for label, _cell in pairs)
        for label, cell in pairs:
            self.stdout.write(f"{label.ljust(width)}  {_styled(cell)}")
        if state.error:
            self.stdout.write("error:")
            self.stdout.write(_printable(state.error.rstrip()))
        self.stdout.write("value:")
        self.stdout.write(
            _printable(json.dumps(state.value, indent=2, ensure_ascii=False, sort_keys=True))
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
            outcome="cancelled",
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
                    "result: " + _printable(json.dumps(result, ensure_ascii=False, default=repr))
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
                    self.stdout.write(CLEAR_SCREEN, ending="")
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

    # --- workers -------------------------------------------------------------------

    def handle_worker(
        self,
        *,
        task_names: list[str] | None,
        concurrency: int,
        poll: float,
        grace: float,
        once: bool,
        verbosity: int = 1,
        **_: Any,
    ) -> None:
        registered = registered_tasks()
        names = task_names or list(registered)
        unknown = [name for name in names if name not in registered]
        if unknown:
            known = ", ".join(registered) or "none"
            raise CommandError(
                f"No background task is registered as {', '.join(map(repr, unknown))} "
                f"(registered: {known})."
            )
        if not names:
            raise CommandError("No background task is registered, so there is nothing to run.")
        tasks = [registered[name] for name in names]
        for task in tasks:
            try:
                task.effective_schedule  # noqa: B018  (a bad BGTASKS_SCHEDULES entry raises)
            except (TypeError, ValueError) as exc:
                raise CommandError(f"BGTASKS_SCHEDULES[{task.name!r}]: {exc}") from None
        worker = Worker(tasks, concurrency=concurrency, poll=poll, grace=grace)
        with _log_to(self.stderr, verbosity), stop_on_signals(worker.stopping):
            worker.run(once=once)

    def handle_workers(self, *, json_output: bool, **_: Any) -> None:
        workers = BackgroundTask.objects.work.workers()
        if json_output:
            self._json({"workers": [worker.as_json() for worker in workers]})
            return
        if not workers:
            self.stdout.write("No worker has reported itself.")
            return
        self._table(
            ["WORKER", "HOST", "PID", "CONCURRENCY", "RUNNING", "TASKS", "HEARTBEAT", "STARTED"],
            [
                [
                    worker.id,
                    worker.host,
                    str(worker.pid),
                    str(worker.concurrency),
                    ", ".join(worker.running),
                    ", ".join(worker.tasks),
                    display.ago(worker.age),
                    display.when(worker.started_at),
                ]
                for worker in workers
            ],
        )

    def handle_request(
        self, *, name: str, args: list[Any], kwargs: dict[str, Any], **_: Any
    ) -> None:
        try:
            task = get_task(name)
        except UnknownTask:
            known = ", ".join(registered_tasks()) or "none"
            raise CommandError(
                f"No background task is registered as {name!r} (registered: {known})."
            ) from None
        try:
            accepted = BackgroundTask.objects.request_run(
                name, args=args, kwargs=kwargs, requested_by="manage.py bgtasks", ttl=task.ttl
            )
        except (ValueError, TypeError) as exc:
            raise CommandError(str(exc)) from None
        if not accepted:
            raise CommandError(f"Task {name!r} already has a pending request.")
        self.stdout.write(self.style.SUCCESS(f"Requested {name!r}; a worker will run it."))

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
        self.stdout.write(_printable(json.dumps(data, indent=2, ensure_ascii=False)))

    def _status(self, state: TaskState) -> Cell:
        text = display.status_text(state)
        styles = {
            "running": self.style.SUCCESS,
            "cancel requested": self.style.WARNING,
            "stale": self.style.ERROR,
        }
        style = styles.get(state.status)
        return (text, style) if style else text

    def _outcome(self, outcome: str) -> Cell:
        if outcome in ("failed", "lost"):
            return (outcome, self.style.ERROR)
        if outcome in ("cancelled", "released-by-operator"):
            return (outcome, self.style.WARNING)
        return outcome

    def _row(self, state: TaskState) -> list[Cell]:
        return [
            state.name,
            self._status(state),
            display.progress_label(state),
            state.owner,
            str(state.token),
            self._outcome(state.outcome),
            _ago(state.heartbeat_age),
            display.when(state.started_at),
            display.when(state.finished_at),
            display.seconds(state.duration),
        ]

    def _table(self, headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> None:
        """Columns padded to their widest plain text, then styled: the escape
        codes of a coloured cell must not count towards its width."""
        widths = [len(header) for header in headers]
        for row in rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(_plain(cell)))
        heading = "  ".join(
            header.ljust(width) for header, width in zip(headers, widths, strict=True)
        )
        self.stdout.write(self.style.MIGRATE_HEADING(heading.rstrip()))
        for row in rows:
            cells = [_styled(cell, width) for cell, width in zip(row, widths, strict=True)]
            self.stdout.write("  ".join(cells).rstrip())


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _seconds(low: float, high: float) -> Callable[[str], float]:
    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a number of seconds, not {text!r}"
            ) from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g}, not {text}")
        return value

    return seconds


def _json_list(text: str) -> list[Any]:
    value = _json(text)
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"must be a JSON list, not {text!r}")
    return value


def _json_object(text: str) -> dict[str, Any]:
    value = _json(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, not {text!r}")
    return value


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"is not valid JSON: {exc}") from None


@contextlib.contextmanager
def _log_to(stream: OutputWrapper, verbosity: int) -> Iterator[None]:
    """The worker logs through ``logging``; when the site configured no handler
    for it, show its INFO lines (WARNING at -v 0) on the command's stderr."""
    logger = logging.getLogger("django_bgtasks")
    if logger.handlers or (logger.propagate and logging.getLogger().handlers):
        yield
        return
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    previous = logger.level
    logger.setLevel(logging.INFO if verbosity >= 1 else logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def _plain(cell: Cell) -> str:
    return cell if isinstance(cell, str) else cell[0]


def _styled(cell: Cell, width: int = 0) -> str:
    if isinstance(cell, str):
        return cell.ljust(width)
    text, style = cell
    return style(text.ljust(width))


def _ago(age: float | None) -> str:
    return "" if age is None else f"{display.seconds(age)} ago"


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
