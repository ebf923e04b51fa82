"""The ``bgtasks`` command's filter of Django Tasks and its bulk actions:
``bgtasks list --status FAILED --since 1h``, and ``bgtasks retry``,
``cancel`` and ``delete`` with the same options in place of one task's id
(``bgtasks retry --status FAILED --task PATH --since 1h``).

The options are the API list's terms (``--status``, ``--queue``, ``--task``,
``--backend``, ``--args``, ``--error``, ``--key``, ``--since``,
``--until``), checked by ``QueuedFilter.parse``; a bad one is a
``CommandError`` (exit status 1) with nothing written. A bulk action acts
at once, as the other subcommands do (a script runs it: there is nobody to
ask), and prints what it did, the count of each kind; ``--dry-run`` prints
how many tasks match and does nothing (the admin's confirmation page, for a
terminal). operations/bulk.py acts, and its counts are worded by
operations/display.py, as the admin words them.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_bgtasks.operations import bulk, display
from django_bgtasks.operations.queued import QueuedFilter

# Each term's option, and its help: the API list's names (http/paging.py).
TERMS = {
    "status": "READY, RUNNING, SUCCESSFUL, FAILED (failed for good), or RETRYING "
    "(ready again after a failed attempt).",
    "queue": "A queue name.",
    "task": "A task path (module.function).",
    "backend": "A backend alias.",
    "args": 'JSON the arguments contain: {"user_id": 5} (keyword), [5] (positional).',
    "error": "Text an error contains, in any case.",
    "key": "A concurrency or rate key.",
    "since": "Finished (or, not finished, enqueued) at or after: an ISO 8601 time, or an "
    "age such as 30m, 2h, 7d.",
    "until": "Finished (or enqueued) at or before: a time or an age, as --since.",
}
# The options' dests: not the terms' own names, which other options have.
_DEST = "match_{}"


def add_filter_options(parser: CommandParser) -> None:
    """Declare the filter's options on a subcommand's ``parser``."""
    group = parser.add_argument_group("Django Tasks filter")
    for term, help_text in TERMS.items():
        group.add_argument(f"--{term}", dest=_DEST.format(term), default=None, help=help_text)


def add_bulk_options(parser: CommandParser) -> None:
    """The filter's options and ``--dry-run``, on a bulk action's ``parser``."""
    add_filter_options(parser)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="With filter options: only say how many Django Tasks match.",
    )


def filter_of(options: dict[str, Any]) -> QueuedFilter | None:
    """The filter ``options`` name, or ``None`` when they name no term."""
    terms = {term: options.get(_DEST.format(term)) for term in TERMS}
    given = {term: value for term, value in terms.items() if value is not None}
    if not given:
        return None
    try:
        return QueuedFilter.parse(**given)
    except (TypeError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def by_filter(
    command: BaseCommand,
    action: str,
    named: str | None,
    options: dict[str, Any],
    *,
    dry_run: bool,
    either: str,
) -> bool:
    """``action`` on the filter ``options`` name, when they name one instead of
    a task (``named``): whether they did. Both or neither is a ``CommandError``
    saying ``either``."""
    filters = filter_of(options)
    if (named is None) == (filters is None):
        raise CommandError(either)
    if filters is None:
        return False
    act(command, action, filters, dry_run=dry_run)
    return True


def act(command: BaseCommand, action: str, filters: QueuedFilter, *, dry_run: bool) -> None:
    """``action`` on every task ``filters`` matches (with ``dry_run``, only
    how many match), and say what it did."""
    try:
        selection = bulk.Selection.of(filters)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if dry_run:
        count = bulk.matching(selection)
        command.stdout.write(f"{count} Django Tasks match; nothing was done (--dry-run).")
        return
    result = bulk.act(action, selection)
    command.stdout.write(command.style.SUCCESS(display.bulk_result(result)))
