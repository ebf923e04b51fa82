"""``@background_task``: named work that the admin, the JSON API and the
``bgtasks`` command can start by name.

Tasks are registered when their module is imported. django-bgtasks imports
the ``tasks`` module of every installed app at start-up (as the admin does with
``admin`` modules), so put them in ``yourapp/tasks.py``.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, ParamSpec, TypeVar, cast

from django.db import connections

from django_bgtasks import tracing
from django_bgtasks.background import registry
from django_bgtasks.background.schedules import Cron, Every, parse_schedule
from django_bgtasks.choices import Outcome
from django_bgtasks.conf import conf
from django_bgtasks.core.runner import RunningLease, lease
from django_bgtasks.db.outages import close_broken_connections
from django_bgtasks.exceptions import UnknownTask
from django_bgtasks.limits import MAX_TTL
from django_bgtasks.models import BackgroundTask
from django_bgtasks.validation import (
    check_arguments,
    encode_value,
    is_finite_number,
    validate_attempts,
    validate_name,
    validate_timeout,
    validate_ttl,
)

P = ParamSpec("P")
R = TypeVar("R")

# Without max_attempts: a resumable task gets this many attempts, others one.
RESUMABLE_ATTEMPTS = 3
# Without retry_delay: seconds before the first retry; each one waits twice as long.
RETRY_DELAY = 10.0


@dataclass(frozen=True)
class BackgroundTaskFunction(Generic[P, R]):
    """A function registered with ``@background_task``. It takes the
    :class:`RunningLease` as its first argument.

    ``schedule`` (parsed), ``resume``, ``max_attempts`` and ``retry_delay``
    tell ``bgtasks worker`` when to run it again, ``timeout`` how long a
    run it runs may go on; see docs/workers.md.
    """

    name: str
    func: Callable[..., R]
    ttl: float | None = None
    schedule: Every | Cron | None = None
    resume: bool = False
    max_attempts: int = 1
    retry_delay: float = RETRY_DELAY
    timezone: str | None = None  # a cron schedule's (BGTASKS_SCHEDULES' too)
    # Seconds a run may go on, by the database's clock (TaskTimedOut); None: no limit.
    timeout: float | None = None

    @property
    def effective_schedule(self) -> Every | Cron | None:
        """The schedule workers follow: ``BGTASKS_SCHEDULES[name]`` when the
        site sets one (checked at start-up, bgtasks.E008), else the task's own."""
        schedules = conf.SCHEDULES
        if isinstance(schedules, dict) and self.name in schedules:
            schedule = schedules[self.name]
            # A cron string the site sets is read in the task's time zone.
            return parse_schedule(schedule, self.timezone if isinstance(schedule, str) else None)
        return self.schedule

    @property
    def effective_ttl(self) -> float:
        """The ttl its runs are claimed with: its own, else ``BGTASKS_TTL``."""
        return conf.TTL if self.ttl is None else self.ttl

    def retry_delay_for(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1, 2, ...): doubling."""
        return float(self.retry_delay * 2 ** min(max(attempt - 1, 0), 16))

    @property
    def description(self) -> str:
        """The first line of the function's docstring."""
        doc = (self.func.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def options(self, *, ttl: float | None = None) -> BackgroundTaskFunction[P, R]:
        """A copy with another ttl, for one run (the registry is unchanged)."""
        if ttl is not None:
            _check_ttl(ttl)
        return replace(self, ttl=ttl)

    def run(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run here, under the lease, and return what the function returns (also
        stored as the run's ``result``); raises :class:`LeaseHeld` if it is held."""
        with lease(self.name, ttl=self.ttl, run_args=self._run_args(args, kwargs)) as running:
            result = self.func(running, *args, **kwargs)
            running.result = result
            return result

    def request(self, *args: P.args, **kwargs: P.kwargs) -> bool:
        """Ask a ``bgtasks worker`` to run it with these arguments (JSON-encodable,
        and ones the function takes: else a ``TypeError``, with nothing written).
        ``False`` when a request is already pending; see ``request_run()``."""
        return BackgroundTask.objects.request_run(
            self.name, args=args, kwargs=kwargs, ttl=self.ttl
        )

    def _run_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """The arguments as the lease row keeps them, for a worker that resumes
        a lost run. A resumable task's must encode (a clear ``TypeError`` before
        the claim); another task's are kept only when they do."""
        run_args = {"args": list(args), "kwargs": kwargs}
        if self.resume:
            encode_value(run_args)
            return run_args
        try:
            encode_value(run_args)
        except (TypeError, ValueError):
            return None
        return run_args

    def start(self, *args: P.args, **kwargs: P.kwargs) -> RunningLease | None:
        """Claim the lease here and now, then run in a background thread.

        Returns the :class:`RunningLease` (``.wait()`` for the end, then
        ``.result`` or ``.exception``), or ``None`` when the task is already
        running anywhere. Claiming before the thread starts means there is no
        moment when the work was started but nobody holds the lease.
        Arguments the function can't take are a ``TypeError`` before the
        claim, as ``request()``'s are.
        """
        check_arguments(self.func, args, kwargs, passed_first=True, task=repr(self.name))
        running = RunningLease.claim(
            self.name, ttl=self.ttl, run_args=self._run_args(args, kwargs)
        )
        if running is None:
            return None
        # The run's thread starts without this one's context: its span
        # continues the caller's trace through the stored form, as a worker's.
        self.run_in_thread(running, args, kwargs, tracing.current_context())
        return running

    def run_in_thread(
        self,
        running: RunningLease,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        trace_context: str | None = None,
    ) -> threading.Thread:
        """Run the claimed ``running`` in a new daemon thread, which finishes it
        (release with the outcome) and closes its own connections. Its span
        continues the trace of ``trace_context``, where it was asked for
        (django_bgtasks.tracing)."""
        thread = threading.Thread(
            target=self._run_started,
            args=(running, args, kwargs, trace_context),
            name=f"bgtasks:{self.name}",
            daemon=True,
        )
        thread.start()
        return thread

    # Its parameters are alike run_in_thread()'s on purpose: its thread's target.
    def _run_started(
        self,
        running: RunningLease,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        trace: str | None,
    ) -> None:
        # The run's consumer span, the function's spans inside it (tracing.py).
        with tracing.run(self.name, trace, _traced(running)) as span:
            try:
                try:
                    running.result = self.func(running, *args, **kwargs)
                except BaseException as exc:
                    running.exception = exc
                # As after a request: a connection the function broke or left
                # in a transaction is closed, or the run's end would be written
                # into that transaction, and rolled back with it.
                close_broken_connections()
                running.finish(running.exception, result=running.result)
            except BaseException as exc:  # finish() raised LeaseLost; record it
                running.exception = exc
            finally:
                connections.close_all()  # this thread's connections only
            _traced_end(running, span)


def _traced(running: RunningLease) -> dict[str, Any]:
    """The attributes of a run's span (django_bgtasks.tracing)."""
    return {
        tracing.TASK: running.name,
        tracing.TOKEN: running.token,
        tracing.ATTEMPT: running.attempt,
        tracing.CLIENT_ID: running.owner,
        tracing.TRIGGER: str(running.trigger),
    }


def _traced_end(running: RunningLease, span: tracing.Span) -> None:
    """How the run ended, on its span: the outcome (``lost`` when its lease
    was), and for a failed, timed-out or lost run, status ERROR with its exception."""
    span.set(tracing.OUTCOME, str(running.outcome or Outcome.LOST))
    if running.outcome is None:
        span.failed(running.exception, "the lease was lost")
    elif running.outcome in (Outcome.FAILED, Outcome.TIMED_OUT):
        span.failed(running.exception)


def _check_ttl(ttl: float) -> None:
    # The ttl alone, not BGTASKS_HEARTBEAT_INTERVAL against it: tasks modules
    # are imported at start-up, before the system checks run, so a setting
    # that does not fit must be bgtasks.E002's to report, not a traceback of
    # every command. The run refuses it when it starts (heartbeat_interval()).
    validate_ttl(ttl)


def _check_attempts(max_attempts: object, resume: bool) -> int:
    if max_attempts is None:
        return RESUMABLE_ATTEMPTS if resume else 1
    return validate_attempts(max_attempts)


def _check_delay(retry_delay: object) -> float:
    if retry_delay is None:
        return RETRY_DELAY
    if not is_finite_number(retry_delay) or not 0 <= retry_delay <= MAX_TTL:
        raise ValueError(
            f"retry_delay must be a number of seconds from 0 to {MAX_TTL:g}, not {retry_delay!r}"
        )
    return float(retry_delay)


def background_task(
    *,
    name: str,
    ttl: float | None = None,
    schedule: dt.timedelta | str | None = None,
    resume: bool = False,
    max_attempts: int | None = None,
    retry_delay: float | None = None,
    timezone: str | None = None,
    timeout: float | None = None,
) -> Callable[[Callable[..., R]], BackgroundTaskFunction[..., R]]:
    """Register a function as the background task ``name``.

    ::

        @background_task(name="log-cleanup", ttl=120, schedule="0 3 * * *", resume=True)
        def log_cleanup(lease, days=30):
            done = (lease.resume_from or {}).get("done", 0)
            ...
            lease.update({"done": n, "total": total})

        log_cleanup.start(days=7)   # here, in a thread
        log_cleanup.request(days=7)  # by a ``bgtasks worker``

    ``schedule`` is a ``timedelta`` or a five-field cron string, read in
    ``timezone`` (an IANA name; default ``settings.TIME_ZONE``); ``resume``
    has a worker claim a lost or interrupted run again, with ``lease.resume_from``;
    ``max_attempts`` (default 3 with ``resume``, else 1) bounds the attempts,
    lost and failed alike; ``retry_delay`` (default 10 s, doubling) spaces the
    retries of a failed run (or of one that timed out); ``timeout`` (seconds)
    bounds a run a worker runs: past it, by the database's clock, its next
    ``check()``/``update()`` raises :class:`~django_bgtasks.TaskTimedOut` and
    the run ends ``timed-out``, and a run that does not stop within the
    worker's ``--grace`` more is ended ``timed-out`` by the worker
    (docs/workers.md). A bad value is a ``ValueError``/``TypeError`` here.
    """
    name = validate_name(name)
    if ttl is not None:
        _check_ttl(ttl)
    if not isinstance(resume, bool):
        raise TypeError(f"resume must be True or False, not {type(resume).__name__}")
    parsed = parse_schedule(schedule, timezone)
    attempts = _check_attempts(max_attempts, resume)
    delay = _check_delay(retry_delay)
    timeout = validate_timeout(timeout)

    def register(func: Callable[..., R]) -> BackgroundTaskFunction[..., R]:
        task: BackgroundTaskFunction[..., R] = BackgroundTaskFunction(
            name, func, ttl, parsed, resume, attempts, delay, timezone, timeout
        )
        registry.add(task)
        return task

    return register


def get_task(name: str) -> BackgroundTaskFunction[..., Any]:
    """The registered task ``name``, or :class:`UnknownTask`."""
    task = registry.get(name)
    if task is None:
        raise UnknownTask(name)
    return cast(BackgroundTaskFunction[..., Any], task)


def registered_tasks() -> dict[str, BackgroundTaskFunction[..., Any]]:
    """Every registered task, by name."""
    return cast(dict[str, BackgroundTaskFunction[..., Any]], registry.registered())
