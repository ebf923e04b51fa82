"""What the ``bgtasks`` worker subcommands do: ``worker``, ``workers`` and ``request``.

The command (``management/commands/bgtasks.py``) declares them
(``management/arguments.py``) and hands its parsed options here; failures
are ``CommandError``s, as everywhere in the command.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.core.management.color import Style

from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.conf import lease_backends
from django_bgtasks.core.states import WorkerState
from django_bgtasks.db.read_database import ReadSource
from django_bgtasks.exceptions import UnknownTask
from django_bgtasks.management.interrupts import stop_on_signals
from django_bgtasks.management.terminal import Cell, write_json, write_table
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import display
from django_bgtasks.operations import workers as worker_views
from django_bgtasks.operations.health import problem
from django_bgtasks.operations.pause import declared_queues
from django_bgtasks.queue.task_schedules import ScheduleError
from django_bgtasks.worker import prometheus
from django_bgtasks.worker.loop import Worker

WORKER_COLUMNS = ("WORKER", "HOST", "PID", "STATE", "CONCURRENCY", "RUNNING", "TASKS", "HEARTBEAT")


def run_worker(
    stderr: OutputWrapper,
    *,
    task_names: list[str] | None,
    concurrency: int,
    poll: float,
    grace: float,
    once: bool,
    verbosity: int,
    queues: list[str] | None = None,
    metrics_port: int | None = None,
) -> None:
    """``worker``: until SIGTERM/SIGINT (a graceful stop; a second one stops at
    once, and exits with status 128 + the signal's number), or with ``once``,
    until done. With ``metrics_port``, its metrics are served there."""
    if metrics_port is not None and not prometheus.INSTALLED:
        raise CommandError(prometheus.NOT_INSTALLED)
    _check_database()
    registered = registered_tasks()
    run_queued = queues is not None or uses_lease_backend()
    names = task_names or list(registered)
    unknown = [name for name in names if name not in registered]
    if unknown:
        raise CommandError(
            f"No background task is registered as {', '.join(map(repr, unknown))} "
            f"(registered: {', '.join(registered) or 'none'})."
        )
    if not names and not run_queued:
        raise CommandError(
            "No background task is registered and TASKS uses no LeaseBackend, so there is "
            "nothing to run."
        )
    tasks = [registered[name] for name in names]
    if run_queued:
        try:
            from django_bgtasks.queue import execute as queued  # noqa: F401  (needs Django's Tasks framework)
        except ImportError as exc:
            raise CommandError(str(exc)) from None
    for task in tasks:
        try:
            task.effective_schedule  # noqa: B018  (a bad BGTASKS_SCHEDULES entry raises)
        except (TypeError, ValueError) as exc:
            raise CommandError(f"BGTASKS_SCHEDULES[{task.name!r}]: {exc}") from None
    # The metrics are the worker's hooks; they read its slots at each scrape.
    hooks = prometheus.WorkerMetrics(lambda: worker.slots()) if metrics_port is not None else None
    try:
        # (Alike other calls by keyword in shape only: the worker's options.)
        worker = Worker(
            tasks,
            concurrency=concurrency,
            poll=poll,
            grace=grace,
            queues=queues,
            run_queued=run_queued,
            hooks=hooks,
        )
    except ScheduleError as exc:  # a bad TASKS SCHEDULES entry (bgtasks.E023-E028)
        raise CommandError(str(exc)) from None
    except ValueError as exc:  # a bad --queue name, say
        raise CommandError(str(exc)) from None
    _check_queues(worker.queues)
    close_metrics = None
    if hooks is not None and metrics_port is not None:
        try:
            close_metrics = hooks.serve(metrics_port)
        except OSError as exc:  # busy, or not ours to bind
            raise CommandError(
                f"--metrics-port {metrics_port}: can't serve the metrics there: "
                f"{exc.strerror or exc}"
            ) from None
    # A second signal stops at once (the first began a graceful stop).
    signals: list[int] = []

    def at_once(signum: int) -> None:
        signals.append(signum)
        worker.stop_now()

    try:
        with (
            _log_to(stderr, verbosity),
            stop_on_signals(worker.stopping, first=worker.signalled, again=at_once),
        ):
            worker.run(once=once)
    finally:
        if close_metrics is not None:
            close_metrics()
    if worker.stopped_at_once:
        # 128 + the signal: the status of a process the signal ended, as shells report it.
        signum = signals[0] if signals else signal.SIGTERM
        raise CommandError(
            f"Stopped at once on a second {signal.Signals(signum).name}; the runs still going "
            "were handed back.",
            returncode=128 + signum,
        )


def _check_database() -> None:
    """Refuse to start on a lease database that DATABASES lacks, or whose
    tables are not migrated, in one line that says what to do (the worker's
    first statements had failed in a traceback of chained errors). One that
    does not answer is waited for, said in one line: a worker started with
    its database down, or in a failover, comes up when the database does,
    as a running worker rides out an outage."""
    found = problem()
    if found is None:
        return
    if not found.unreachable:
        raise CommandError(str(found))
    logging.getLogger("django_bgtasks.worker").warning(
        "%s; the worker retries until it answers", found
    )


def _check_queues(queues: list[str] | None) -> None:
    """Refuse a ``--queue`` that no ``LeaseBackend`` of ``TASKS`` takes (a
    typing mistake: its worker would claim nothing, ever), where each names
    its ``QUEUES`` (an empty one takes any queue: then any name may come)."""
    known, any_name = declared_queues()
    if queues is None or any_name:
        return
    unknown = sorted(set(queues) - known)
    if unknown:
        raise CommandError(
            f"--queue {', '.join(map(repr, unknown))}: no LeaseBackend of TASKS has "
            f"such a queue (their QUEUES: {', '.join(sorted(known)) or 'none'})."
        )


def uses_lease_backend() -> bool:
    """Whether a backend in ``TASKS`` is (a subclass of) ``LeaseBackend``."""
    return bool(lease_backends())


def show_workers(
    stdout: OutputWrapper, style: Style, *, json_output: bool, source: ReadSource
) -> None:
    """``workers``: each worker's last report, its age by the database's clock;
    a silent one as such, with what became of the runs it reported (read
    from ``source``, which the JSON names as the API's list does)."""
    workers = worker_views.workers()
    if json_output:
        items = [worker.as_json() for worker in workers]
        write_json(stdout, {"workers": items, "read_from": source.as_json()})
        return
    if not workers:
        stdout.write("No worker has reported itself.")
        return
    rows: list[list[Cell]] = [
        [
            worker.id,
            worker.host,
            str(worker.pid),
            _worker_status(worker, style),
            str(worker.concurrency),
            display.worker_runs(worker),
            ", ".join(worker.tasks),
            display.ago(worker.age),
        ]
        for worker in workers
    ]
    write_table(stdout, style, WORKER_COLUMNS, rows)


def _worker_status(worker: WorkerState, style: Style) -> Cell:
    text = display.worker_status(worker)
    return (text, style.WARNING) if worker.silent else text


def request(
    stdout: OutputWrapper,
    style: Style,
    *,
    name: str,
    task_args: list[Any],
    task_kwargs: dict[str, Any],
) -> None:
    """``request NAME``: file a request that a worker performs (``request_run()``
    decides whether a worker can run it, and whether it takes the arguments)."""
    try:
        accepted = BackgroundTask.objects.request_run(
            name, args=task_args, kwargs=task_kwargs, requested_by="manage.py bgtasks"
        )
    except UnknownTask:
        known = ", ".join(registered_tasks()) or "none"
        raise CommandError(
            f"No background task is registered as {name!r} (registered: {known})."
        ) from None
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    if not accepted:
        raise CommandError(f"Task {name!r} already has a pending request.")
    stdout.write(style.SUCCESS(f"Requested {name!r}; a worker will run it."))


# Django's own Tasks framework logs each task's enqueue (DEBUG), start and
# end (INFO) under its package's name: Django's, and the backport's.
DJANGO_TASKS_LOGGERS = ("django.tasks", "django_tasks")


@contextlib.contextmanager
def _log_to(stream: OutputWrapper, verbosity: int) -> Iterator[None]:
    """Show the worker's log on the command's stderr, each line with its time:
    its INFO lines (WARNING at -v 0, DEBUG at -v 3), and at -v 2 and 3 also
    Django's own ``django.tasks`` lines (INFO; DEBUG at -v 3). Each logger
    the site configured a handler for is left to it."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    ours = logging.DEBUG if verbosity >= 3 else logging.INFO if verbosity >= 1 else logging.WARNING
    levels = {"django_bgtasks": ours}
    if verbosity >= 2:
        levels.update(dict.fromkeys(DJANGO_TASKS_LOGGERS, min(ours, logging.INFO)))
    shown = []
    for name, level in levels.items():
        logger = logging.getLogger(name)
        if logger.handlers or (name == "django_bgtasks" and _root_shows(logger)):
            continue
        shown.append((logger, logger.level))
        logger.setLevel(level)
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger, previous in shown:
            logger.removeHandler(handler)
            logger.setLevel(previous)


def _root_shows(logger: logging.Logger) -> bool:
    """Whether ``logger``'s records reach a handler of the root logger."""
    return logger.propagate and bool(logging.getLogger().handlers)
