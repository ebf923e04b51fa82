"""The ``bgtasks`` command line: each subcommand's arguments, and the rules
their values must pass.

:func:`add_arguments` declares the subcommands of ``SUBCOMMANDS``, in the
order ``--help`` lists them, each one's arguments by a small function; every
subcommand also takes Django's common options (:func:`_common_options`). An option value that
breaks its rule (``OPTION_RULES``, and the worker options' own types) is
refused while the command line is parsed, as argparse refuses any bad
argument (usage on stderr, exit status 2; from ``call_command``, a
``CommandError``); :func:`checked` applies the same rules to values handed
over by keyword, past argparse. A new subcommand is one entry in
``SUBCOMMANDS`` (its summary, and a function that declares its arguments),
and one ``handle_<name>`` method on the command.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from django_bgtasks.authentication import DEFAULT_MAX_AGE, validate_max_age
from django_bgtasks.limits import MAX_GRACE, MAX_POLL
from django_bgtasks.management.bulk import add_bulk_options, add_filter_options
from django_bgtasks.operations.health import required_workers
from django_bgtasks.operations.prune import history_days
from django_bgtasks.operations.queued import page_size
from django_bgtasks.validation import (
    parse_json,
    validate_args,
    validate_kwargs,
    validate_token,
    validate_ttl,
)

# The bound for --interval: beyond it the wait overflows (and it makes no
# sense for a refresh).
MAX_WATCH_INTERVAL = 86400.0
# The highest TCP port (--metrics-port).
MAX_PORT = 65535


def watch_interval(interval: float) -> float:
    """``--interval``: above 0 and at most ``MAX_WATCH_INTERVAL`` seconds."""
    if not 0 < interval <= MAX_WATCH_INTERVAL:
        raise ValueError(
            f"--interval must be above 0 and at most {MAX_WATCH_INTERVAL:g} seconds, "
            f"not {interval:g}."
        )
    return interval


def watch_iterations(iterations: int) -> int:
    """``--iterations``: 1 or more."""
    if iterations < 1:
        raise ValueError(f"--iterations must be 1 or more, not {iterations}.")
    return iterations


# Each option that takes a value, by dest: how its text is read, and the rule
# the value must pass (for ttl and token, the lease operations' own; for days,
# the prune operation's).
OPTION_RULES: dict[str, tuple[type[float] | type[int], Callable[[Any], Any]]] = {
    "ttl": (float, validate_ttl),
    "token": (int, validate_token),
    "days": (float, history_days),
    "interval": (float, watch_interval),
    "iterations": (int, watch_iterations),
    "max_age": (int, validate_max_age),
    "workers": (int, required_workers),
    "limit": (int, page_size),
}


def option_type(dest: str) -> Callable[[str], Any]:
    """The argparse ``type=`` of option ``dest``, so that a bad value is
    refused while the command line is parsed, with its rule's message."""
    parse, rule = OPTION_RULES[dest]

    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {parse.__name__} value: {text!r}") from None
        try:
            return rule(value)
        except (ValueError, TypeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def checked(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with each value that has a rule passed through it (a
    ``ValueError``/``TypeError`` for a bad one): ``call_command("bgtasks",
    "prune", days=-1)`` hands values over past argparse and its ``type=``."""
    options = dict(options)
    for dest, (_parse, rule) in OPTION_RULES.items():
        if options.get(dest) is not None:
            options[dest] = rule(options[dest])
    return options


def add_arguments(parser: CommandParser) -> None:
    """Declare every subcommand of ``bgtasks`` on the command's ``parser``."""
    common = _common_options()
    subcommands = parser.add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND", title="subcommands"
    )
    for name, (summary, declare) in SUBCOMMANDS.items():
        declare(subcommands.add_parser(name, parents=[common], help=summary))


# --- the options several subcommands share --------------------------------------------------


def _json_option(
    parser: CommandParser,
    help_text: str = "Print only JSON: TaskState.as_json(), the JSON API's shape.",
) -> None:
    parser.add_argument("--json", action="store_true", dest="json_output", help=help_text)


def _token_option(parser: CommandParser, verb: str) -> None:
    _ruled(
        parser,
        "--token",
        f"{verb} only if this claim (fencing token) still holds the lease "
        "(default: the claim seen when the command starts).",
    )


def _ruled(parser: CommandParser, flag: str, help_text: str, **extra: Any) -> None:
    """Option ``flag``, whose value must pass the ``OPTION_RULES`` rule of its
    dest (default: ``None``, argparse's, unless ``extra`` says otherwise)."""
    dest = flag.removeprefix("--").replace("-", "_")
    parser.add_argument(flag, type=option_type(dest), help=help_text, **extra)


# --- each subcommand's arguments ---------------------------------------------------------------


def _show(show: CommandParser) -> None:
    show.add_argument("name", help="The task's name.")
    _json_option(show)


def _task_arguments(parser: CommandParser) -> None:
    """``--args`` and ``--kwargs``, the run's arguments (``run`` and ``request``)."""
    parser.add_argument(
        "--args",
        type=_json_of(validate_args, "args"),
        default=[],
        dest="task_args",
        help="Positional arguments, as a JSON list (default: none).",
    )
    parser.add_argument(
        "--kwargs",
        type=_json_of(validate_kwargs, "kwargs"),
        default={},
        dest="task_kwargs",
        help="Keyword arguments, as a JSON object (default: none).",
    )


def _run(run: CommandParser) -> None:
    run.add_argument("name", help="The registered task's name.")
    _task_arguments(run)
    _ruled(
        run,
        "--ttl",
        "Lease duration in seconds for this run (default: the task's own, else BGTASKS_TTL).",
    )


def _release(release: CommandParser) -> None:
    release.add_argument("name", help="The task's name.")
    release.add_argument(
        "--force",
        action="store_true",
        help="Really end the holder's lease. Without it, only say who holds it.",
    )
    _token_option(release, "Release")


def _list(listing: CommandParser) -> None:
    _json_option(listing)
    add_filter_options(listing)
    _ruled(
        listing,
        "--limit",
        "With a filter: list at most this many Django Tasks, newest first (1 to 500, default 50).",
    )


def _cancel(cancel: CommandParser) -> None:
    cancel.add_argument(
        "name",
        nargs="?",
        default=None,
        help="The task's name, or a Django Task's id (or the filter's options instead).",
    )
    _token_option(cancel, "Cancel")
    add_bulk_options(cancel)


def _pause(pause: CommandParser) -> None:
    pause.add_argument(
        "name", nargs="?", default=None, help="The background task's name (or --queue)."
    )
    pause.add_argument(
        "--queue",
        default=None,
        help="A Django Tasks queue's name instead, for every LeaseBackend alias.",
    )


def _retry(retry: CommandParser) -> None:
    retry.add_argument(
        "result_id",
        metavar="ID",
        nargs="?",
        default=None,
        help="The failed Django Task's id: its result's UUID (get_result().id, the API's "
        "id); or the filter's options instead, for every failed task they match.",
    )
    add_bulk_options(retry)


def _prune(prune: CommandParser) -> None:
    _ruled(prune, "--days", "Keep this many days of run history (default: BGTASKS_HISTORY_DAYS).")
    prune.add_argument("--dry-run", action="store_true", help="Only say what would be changed.")


def _procedures(procedures: CommandParser) -> None:
    drop = "Drop them all; a worker creates the ones it calls again at its next claim or end."
    procedures.add_argument("--drop", action="store_true", help=drop)


def _token(token: CommandParser) -> None:
    token.add_argument("username", help="An active staff user who may view tasks.")
    _ruled(
        token,
        "--max-age",
        default=DEFAULT_MAX_AGE,
        metavar="SECONDS",
        help_text="How long the token is valid, in seconds (default: %(default)r, 30 days).",
    )


def _watch(watch: CommandParser) -> None:
    _ruled(watch, "--interval", "Seconds between refreshes (default: %(default)r).", default=1.0)
    _ruled(
        watch,
        "--iterations",
        "Stop after this many tables (default: run until Ctrl-C or SIGTERM).",
    )


def _worker(worker: CommandParser) -> None:
    repeatable: dict[str, Any] = {"action": "append", "metavar": "NAME", "default": None}
    worker.add_argument(
        "--task",
        dest="task_names",
        help="Run only this task (repeatable; default: every registered task).",
        **repeatable,
    )
    worker.add_argument(
        "--queue",
        dest="queues",
        help="Run the Django Tasks of this queue (repeatable; default: every queue, when "
        "TASKS uses django_bgtasks.backend.LeaseBackend).",
        **repeatable,
    )
    worker.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        help="Runs at once, each in its own thread (default: %(default)r).",
    )
    worker.add_argument(
        "--poll",
        type=_seconds(0.001, MAX_POLL),
        default=1.0,
        help="At most this many seconds between looks for due work; a change to one of "
        "its tasks (a request, a release) wakes it sooner (default: %(default)r).",
    )
    worker.add_argument(
        "--grace",
        type=_seconds(0, MAX_GRACE),
        default=30.0,
        help="On SIGTERM, seconds to wait for running tasks to stop (default: %(default)r).",
    )
    worker.add_argument(
        "--once", action="store_true", help="Do what is due now, wait for it, and exit."
    )
    worker.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="Serve this worker's metrics for Prometheus on this TCP port, on every IPv4 "
        "interface (needs the metrics extra; default: none).",
    )


def _workers(workers: CommandParser) -> None:
    _json_option(workers, "Print only JSON.")


def _health(health: CommandParser) -> None:
    _ruled(
        health,
        "--workers",
        "Also require this many live workers: beaten within their ttl (default: %(default)r).",
        default=0,
        metavar="N",
    )


def _request(request: CommandParser) -> None:
    request.add_argument("name", help="The registered task's name.")
    _task_arguments(request)


# --- the worker options' value types ---------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a TCP port number, not {text!r}") from None
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be a TCP port from 1 to {MAX_PORT}, not {value}")
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


def _json_of(rule: Callable[[Any], Any], what: str) -> Callable[[str], Any]:
    """JSON text whose value must pass ``rule`` (``validation``'s, as for
    every surface's arguments)."""

    def parse(text: str) -> Any:
        try:
            return rule(parse_json(text, what))
        except (ValueError, TypeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


# --- Django's common options -------------------------------------------------------------------


def _common_options() -> CommandParser:
    """Django's common options (``-v``, ``--settings``, ``--pythonpath``,
    ``--traceback``, the colour options, ``--skip-checks``), for each
    subcommand's parser. Django declares them on the command's parser, which
    argparse lets stand only before the subcommand, and people type
    ``bgtasks worker -v 3``. SUPPRESS: a value only when given, so that one
    given before the subcommand stays. (``--settings`` and ``--pythonpath``
    are applied before any parser runs: ``ManagementUtility`` finds them
    anywhere on the command line.)"""
    common = CommandParser(add_help=False)
    suppress = argparse.SUPPRESS
    common.add_argument(
        "-v",
        "--verbosity",
        type=int,
        choices=[0, 1, 2, 3],
        default=suppress,
        help="Verbosity level (0 to 3; default 1).",
    )
    common.add_argument("--settings", default=suppress, help="A settings module to use.")
    common.add_argument("--pythonpath", default=suppress, help="A directory to add to sys.path.")
    flags = {
        "--traceback": "Display a full stack trace on CommandError exceptions.",
        "--no-color": "Don't colorize the command output.",
        "--force-color": "Force colorization of the command output.",
        "--skip-checks": "Skip system checks.",
    }
    for flag, help_text in flags.items():
        common.add_argument(flag, action="store_true", default=suppress, help=help_text)
    return common


# Each subcommand: its summary in ``--help``, and what declares its arguments;
# in the order ``--help`` lists them. The worker subcommands (the last three)
# are ``management/workers.py``'s.
SUBCOMMANDS: dict[str, tuple[str, Callable[[CommandParser], None]]] = {
    "list": (
        "Every task's state; with filter options, the Django Tasks they match.",
        _list,
    ),
    "show": ("One task, and its runs.", _show),
    "run": (
        "Run a registered task here, in the foreground, under its lease. "
        "Ctrl-C asks it to stop; a second Ctrl-C abandons it.",
        _run,
    ),
    "release": (
        "End a task's lease whoever holds it (for a holder that died or hangs).",
        _release,
    ),
    "cancel": (
        "Ask a task's holder to stop; or cancel a Django Task, or every one the filter "
        "options match.",
        _cancel,
    ),
    "pause": (
        "Start nothing more of a background task (NAME), or claim nothing of a Django "
        "Tasks queue (--queue QUEUE), until unpause; running work finishes.",
        _pause,
    ),
    "unpause": ("Undo a pause of a background task (NAME) or a queue (--queue QUEUE).", _pause),
    "retry": (
        "Run a failed Django Task again (LeaseBackend): ready at once, with one more "
        "attempt if it had used them all.",
        _retry,
    ),
    "delete": (
        "Delete every Django Task the filter options match (not the running ones).",
        add_bulk_options,
    ),
    "prune": (
        "Record silent holders as lost, and delete old run history "
        "(each task's newest run is kept).",
        _prune,
    ),
    "procedures": (
        "On MariaDB, the queue's stored procedures in BGTASKS_DATABASE (--drop: drop them, "
        "for those an earlier release left behind).",
        _procedures,
    ),
    "watch": ("A table of every task, refreshed until Ctrl-C.", _watch),
    "token": (
        "Print a bearer token for the JSON API, for a script or service acting as "
        "USERNAME (see BGTASKS_API_AUTHENTICATION).",
        _token,
    ),
    "worker": (
        "Run requested, scheduled, resumed and retried runs until SIGTERM or Ctrl-C "
        "(any number of workers, on any number of hosts).",
        _worker,
    ),
    "workers": ("Every worker, as it last reported itself.", _workers),
    "queues": (
        "Every Django Tasks queue that has tasks or a pause: paused or not, and its tasks "
        "by status.",
        _workers,
    ),
    "request": (
        "Ask a worker to run a registered task (one pending request per task).",
        _request,
    ),
    "health": (
        "Exit 0 if the database answers, its migrations are applied and (with --workers N) "
        "N workers are live; else exit 1 with the reason (for orchestrators' probes).",
        _health,
    ),
}
