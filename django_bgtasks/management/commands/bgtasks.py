"""``manage.py bgtasks``: see, start, stop and unstick background tasks.

Subcommands: ``list``, ``show NAME``, ``queues`` (the Django Tasks queues),
``run NAME``, ``release NAME --force``, ``cancel NAME``, ``retry ID`` (a
failed Django Task), ``pause NAME`` and ``unpause NAME`` (or ``--queue
QUEUE``: ``management/pauses.py``), ``prune``,
``procedures [--drop]`` (MariaDB's: ``management/procedures.py``), ``watch``,
``token USERNAME`` (a bearer token for
the JSON API), and for workers ``worker``, ``workers``
and ``request NAME`` (``management/workers.py``), and ``health [--workers N]``
(exit 0, or 1 with a one-line reason: ``operations/health.py``). Each reads and writes through
``BackgroundTask.objects``, the task registry and :mod:`django_bgtasks.operations`,
as the admin and the JSON API do, so it gives the same answer on every
replica. ``list`` and ``show`` include registered tasks that never ran
(status ``never run``). ``--json`` (on ``list`` and ``show``) prints only
JSON, in the API's shape (``task_reads.task_json()``). Failures raise
``CommandError``: a message on stderr and exit status 1. An option value that
breaks its rule is refused while the command line is parsed, as argparse
refuses any bad argument (usage on stderr, exit status 2; from
``call_command``, a ``CommandError``).

This module is a thin adapter: the subcommands and their options are declared
in ``management/arguments.py``, and ``handle_<subcommand>`` calls the
operation (:mod:`django_bgtasks.operations`; ``prune``'s rule is
``operations/prune.py``) and puts its result into output. The read
subcommands' pages are laid out in ``management/reads.py``, ``run``'s claim
and foreground loop is ``management/foreground.py``, and the terminal drawing
is :mod:`django_bgtasks.management.terminal`. A new subcommand is one function
in ``management/arguments.py`` and one ``handle_<name>`` method.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.utils import timezone
from django.utils.connection import ConnectionDoesNotExist

from django_bgtasks.authentication import SIGNED_TOKEN, make_token
from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.conf import conf
from django_bgtasks.core.states import TaskState
from django_bgtasks.db import read_database
from django_bgtasks.db.read_database import ReadSource
from django_bgtasks.management import (
    arguments,
    bulk,
    foreground,
    pauses,
    procedures,
    reads,
    workers,
)
from django_bgtasks.management.terminal import write_json
from django_bgtasks.operations import display, queued, queues, task_reads, writes
from django_bgtasks.operations.health import problem
from django_bgtasks.operations.permissions import allowed
from django_bgtasks.operations.prune import WouldPrune, prune
from django_bgtasks.validation import heartbeat_interval


class Command(BaseCommand):
    """``manage.py bgtasks``: the operator's command line."""

    help = (
        "See, start, stop and unstick background tasks: list, show, run, release, cancel, "
        "retry, pause, unpause, prune, procedures, watch, token; workers: worker, workers, "
        "request; probe: health. Every replica gives the same answers: the state is the "
        "database's."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        arguments.add_arguments(parser)

    def handle(self, *args: Any, subcommand: str, **options: Any) -> None:
        # call_command("bgtasks", "prune", days=-1) hands values over by
        # keyword, past argparse and its type= checks: the same rules apply.
        with _bad_input_refused():
            options = arguments.checked(options)
        handler: Callable[..., None] = getattr(self, f"handle_{subcommand}")
        if subcommand == "health":  # whose answer is what the others explain
            handler(**options)
            return
        with _database_explained():
            handler(**options)

    # --- reads -------------------------------------------------------------------

    def handle_list(self, *, json_output: bool, limit: int | None = None, **options: Any) -> None:
        filters = bulk.filter_of(options)
        if filters is None and limit is not None:
            raise CommandError("--limit goes with a filter option (--status, --queue, ...).")
        # Read from the read database (db/read_database.py); what it read is
        # said last, or in the JSON's "read_from".
        with read_database.reading() as source:
            if filters is not None:
                self._list_matching(filters, json_output, limit or queued.RECENT_QUEUED, source)
            else:
                self._list_all(json_output, source)
        self._say_read(source, json_output)

    def _say_read(self, source: ReadSource, json_output: bool) -> None:
        """What a list read (db/read_database.py), last, where a replica is
        named (the JSON's ``"read_from"`` says it there)."""
        said = source.describe()
        if said and not json_output:
            self.stdout.write(self.style.WARNING(said) if source.fallback else said)

    def _list_all(self, json_output: bool, source: ReadSource) -> None:
        """Every task with a row, and every registered one (also never run)."""
        states = task_reads.task_states()
        rows = queued.queued_tasks()
        paused = queues.paused_queues()
        if json_output:
            write_json(
                self.stdout,
                {
                    "tasks": [task_reads.task_json(state) for state in states],
                    "django_tasks": [queued.queued_json(row, paused) for row in rows],
                    "read_from": source.as_json(),
                },
            )
        else:
            reads.show_list(self.stdout, self.style, states, registered_tasks())
            reads.show_queued_list(self.stdout, self.style, rows, paused)

    def _list_matching(
        self, filters: queued.QueuedFilter, json_output: bool, limit: int, source: ReadSource
    ) -> None:
        """The newest ``limit`` Django Tasks ``filters`` matches (a search reads
        its budget of rows at most: it says so when it stopped before the end)."""
        page = queued.queued_page(filters, limit=limit)
        paused = queues.paused_queues()
        if json_output:
            items = [queued.queued_json(row, paused) for row in page.rows]
            more = page.next_before is not None
            write_json(
                self.stdout,
                {"django_tasks": items, "more": more, "read_from": source.as_json()},
            )
            return
        if not page.rows:
            self.stdout.write("No Django Task matches.")
        heading = "Django Tasks the filter matches, newest first:"
        reads.show_queued_list(self.stdout, self.style, page.rows, paused, heading=heading)
        if page.next_before is not None:
            self.stdout.write(
                "Older tasks may match too: the API's list pages through them "
                "(GET <api>/django-tasks/ with the same filter)."
            )

    def handle_show(self, *, name: str, json_output: bool, **_: Any) -> None:
        # A Django Task's result id (LeaseBackend), else a background task's name.
        row = queued.queued_task(name)
        if row is not None:
            paused = queues.paused_queues()
            if json_output:
                write_json(self.stdout, queued.queued_json(row, paused))
            else:
                reads.show_queued(self.stdout, self.style, row, paused)
            return
        state = self._state(name)
        if json_output:
            write_json(self.stdout, task_reads.task_json(state))
        else:
            reads.show_task(self.stdout, self.style, state)

    def handle_watch(
        self, *, interval: float, iterations: int | None, no_color: bool = False, **_: Any
    ) -> None:
        clear = self.stdout.isatty() and not no_color
        reads.watch(
            self.stdout,
            self.stderr,
            self.style,
            interval=interval,
            iterations=iterations,
            clear=clear,
        )

    def handle_workers(self, *, json_output: bool, **_: Any) -> None:
        with read_database.reading() as source:
            workers.show_workers(self.stdout, self.style, json_output=json_output, source=source)
        self._say_read(source, json_output)

    def handle_queues(self, *, json_output: bool, **_: Any) -> None:
        with read_database.reading() as source:
            found = queues.queues()
        if json_output:
            items = [queue.as_json() for queue in found]
            write_json(self.stdout, {"queues": items, "read_from": source.as_json()})
        else:
            reads.show_queues(self.stdout, self.style, found)
        self._say_read(source, json_output)

    def handle_health(self, *, workers: int, **_: Any) -> None:
        found = problem(workers=workers)
        if found is not None:
            raise CommandError(str(found))
        required = f", {workers} live worker(s) or more" if workers else ""
        self.stdout.write(f"healthy: the database answers, its migrations are applied{required}.")

    # --- writes ------------------------------------------------------------------

    def handle_worker(self, *, verbosity: int = 1, **options: Any) -> None:
        keys = ("task_names", "concurrency", "poll", "grace", "once", "queues", "metrics_port")
        workers.run_worker(self.stderr, verbosity=verbosity, **{key: options[key] for key in keys})

    def handle_request(self, *, name: str, task_args: Any, task_kwargs: Any, **_: Any) -> None:
        workers.request(
            self.stdout, self.style, name=name, task_args=task_args, task_kwargs=task_kwargs
        )

    def handle_run(
        self, *, name: str, ttl: float | None, task_args: Any, task_kwargs: Any, **_: Any
    ) -> None:
        foreground.run(
            self.stdout, self.style, name=name, ttl=ttl, args=task_args, kwargs=task_kwargs
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
        # End the claim this command saw (or was told), never one that took over since.
        token = state.token if token is None else token
        with _bad_input_refused():
            result = writes.force_release(name, token=token)
        if not isinstance(result, writes.Released):
            raise CommandError(f"Task {name!r} was not released: {_no_longer_holds(token)}")
        self.stdout.write(
            self.style.SUCCESS(
                f"Released {name!r} (token {token}, held by {state.owner}). That holder can "
                "no longer renew it or write through it."
            )
        )

    def handle_cancel(
        self, *, name: str | None, token: int | None, dry_run: bool = False, **options: Any
    ) -> None:
        either = "Name a task (or a Django Task's id), or give filter options."
        if bulk.by_filter(self, "cancel", name, options, dry_run=dry_run, either=either):
            return
        assert name is not None
        if queued.queued_task(name) is not None:
            self._cancel_queued(name)
            return
        state = self._state(name)
        if not state.running:
            raise CommandError(f"Task {name!r} is not running; there is nothing to cancel.")
        # Ask the run this command saw (or was told), never one that took over since.
        token = state.token if token is None else token
        with _bad_input_refused():
            result = writes.request_cancel(name, token=token)
        if not isinstance(result, writes.CancelRequested):
            raise CommandError(f"Task {name!r} was not cancelled: {_no_longer_holds(token)}")
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

    def _cancel_queued(self, result_id: str) -> None:
        result = writes.cancel_queued(result_id)
        if isinstance(result, writes.QueuedUnknown):
            raise CommandError(f"No Django Task has the id {result_id!r}.")
        if isinstance(result, writes.QueuedFinished):
            raise CommandError(
                f"Django Task {result_id} already finished ({result.row.status.lower()}); "
                "there is nothing to cancel."
            )
        if result.started:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Asked {result.row.owner} to stop Django Task {result_id}. It stops at "
                    "its next check() or update()."
                )
            )
        else:
            self.stdout.write(
                self.style.SUCCESS(f"Cancelled Django Task {result_id}; it will not run.")
            )

    handle_pause = pauses.handle_pause
    handle_unpause = pauses.handle_unpause
    handle_procedures = procedures.handle_procedures

    def handle_retry(
        self, *, result_id: str | None, dry_run: bool = False, **options: Any
    ) -> None:
        either = "Give a failed Django Task's id, or filter options."
        if bulk.by_filter(self, "retry", result_id, options, dry_run=dry_run, either=either):
            return
        assert result_id is not None
        result = writes.retry_queued(result_id)
        if isinstance(result, writes.QueuedUnknown):
            raise CommandError(_unknown_queued(result_id))
        row = result.row
        if isinstance(result, writes.QueuedNotFailed):
            raise CommandError(
                f"Django Task {result_id} is {row.status.lower()}, not failed; only a failed "
                "task is retried."
            )
        if isinstance(result, writes.QueuedKeyHeld):
            holder = f" ({result.holder.uuid})" if result.holder is not None else ""
            raise CommandError(
                f"Django Task {result_id} was not retried: another run of its unique key "
                f"{row.unique_key!r}{holder} is ready or running."
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"Retried Django Task {row.uuid}: ready to run again (attempt "
                f"{row.attempts + 1} of {row.max_attempts})."
            )
        )

    def handle_delete(self, *, dry_run: bool = False, **options: Any) -> None:
        filters = bulk.filter_of(options) or queued.QueuedFilter()
        bulk.act(self, "delete", filters, dry_run=dry_run)

    def handle_prune(self, *, days: float | None, dry_run: bool, **_: Any) -> None:
        with _bad_input_refused():
            result = prune(days, dry_run=dry_run)
        ago = f"that finished more than {result.days:g} day(s) ago."
        if isinstance(result, WouldPrune):
            names = f": {', '.join(result.silent)}" if result.silent else ""
            self.stdout.write(
                f"Would record {len(result.silent)} silent holder(s) as lost{names}."
            )
            self.stdout.write(f"Would delete {result.runs} run(s) {ago}")
            self.stdout.write(f"Would delete {result.queued} Django Task result(s) {ago}")
            return
        self.stdout.write(f"Recorded {result.expired} silent holder(s) as lost.")
        self.stdout.write(
            f"Forgot {result.workers} worker(s) silent for more than "
            f"{display.seconds(result.workers_silent_for)} (killed: they could not remove "
            "their rows)."
        )
        self.stdout.write(self.style.SUCCESS(f"Deleted {result.runs} run(s) {ago}"))
        self.stdout.write(
            self.style.SUCCESS(f"Deleted {result.queued} Django Task result(s) {ago}")
        )

    def handle_token(self, *, username: str, max_age: int, **_: Any) -> None:
        try:
            user = get_user_model()._default_manager.get_by_natural_key(username)
        except ObjectDoesNotExist:
            raise CommandError(f"There is no user {username!r}.") from None
        if not allowed(user, "view"):
            raise CommandError(
                f"{username!r} may not see background tasks: the API, like the admin, needs "
                "an active staff user with the view or change permission on background tasks."
            )
        self.stdout.write(make_token(user, max_age))
        may = "view and operate" if allowed(user, "change") else "view"
        until = timezone.localtime(timezone.now() + timedelta(seconds=max_age))
        self.stderr.write(
            f"A token for {username!r}, who may {may} tasks, valid until "
            f"{until:%Y-%m-%d %H:%M %Z}. Send it as 'Authorization: Bearer <token>'. A new "
            f"password for {username!r}, deactivating them or a new SECRET_KEY revokes it."
        )
        configured = conf.API_AUTHENTICATION
        if not isinstance(configured, list | tuple) or SIGNED_TOKEN not in configured:
            self.stderr.write(
                self.style.WARNING(
                    f"BGTASKS_API_AUTHENTICATION does not list {SIGNED_TOKEN!r}: the API "
                    "accepts this token once it does."
                )
            )

    # --- helpers -----------------------------------------------------------------

    def _state(self, name: str) -> TaskState:
        """``name``'s state; a registered task that never ran has one too."""
        with _bad_input_refused():
            state = task_reads.task_state(name)
        if state is None:
            raise CommandError(f"No task named {name!r} has run, and none is registered.")
        return state


@contextlib.contextmanager
def _bad_input_refused() -> Iterator[None]:
    """Bad input (``ValueError``/``TypeError`` from a check) as a ``CommandError``."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None


@contextlib.contextmanager
def _database_explained() -> Iterator[None]:
    """A lease database that DATABASES lacks, that does not answer or whose
    tables are not migrated: one line that says so and what to do (``health``'s
    answer, operations/health.py), as a ``CommandError``, where the driver's
    error ran to a traceback of chained errors (``--traceback`` still shows
    it). Any other database error is raised as it is."""
    try:
        yield
    except (DatabaseError, ConnectionDoesNotExist) as exc:
        found = problem()
        if found is None:
            raise
        raise CommandError(str(found)) from exc


def _unknown_queued(result_id: str) -> str:
    """Why no Django Task has ``result_id``: none has it, or it is no UUID."""
    try:
        uuid.UUID(result_id)
    except ValueError:
        return (
            f"{result_id!r} is not a Django Task's id: that is the UUID of its result "
            "(get_result().id, the API's id, bgtasks list)."
        )
    return f"No Django Task has the id {result_id!r}."


def _no_longer_holds(token: int) -> str:
    return f"token {token} no longer holds it (it finished, or another run took over)."
