"""The terms of a Django Tasks filter that no index answers: by argument
values, by error text, by flow key and by time (``QueuedFilter``'s
``args``, ``error``, ``key``, ``since`` and ``until``), and how a read with
them stays bounded at any size of the table.

Each term is checked from its text (a query string's, a command's option)
before any SQL: a bad one is a ``ValueError`` that names it.

* ``args``: a JSON value the task's arguments contain. An object is matched
  against its keyword arguments (``{"user_id": 5}``: every task called with
  ``user_id=5``, whatever else), an array against its positional ones (each
  element among them), a scalar as an array of one. PostgreSQL and MariaDB
  test JSON containment (``@>``, ``JSON_CONTAINS``). SQLite has none: a
  keyword's value is compared whole (by its JSON path: ``{"tags": ["a"]}``
  matches ``tags=["a"]`` only, not ``tags=["a", "b"]`` as containment
  does), and a positional one by a text match of the arguments' compact
  JSON (``[5]`` matches ``5`` between two commas or brackets: a string
  argument holding ``,5,`` too).
* ``error``: a text any of its errors' tracebacks or exception classes
  contains, in any case.
* ``key``: its concurrency or its rate key.
* ``since`` and ``until``: when it finished, or when it was enqueued for one
  that has not finished, at or after ``since`` and at or before ``until``;
  each an ISO 8601 time (in the site's time zone when it names none) or an
  age such as ``90s``, ``30m``, ``2h`` or ``7d``, by the database's clock.

These terms are tested row by row, on the rows the filter's indexed terms
(status, queue, task path, backend) read newest first: :func:`scan` reads
those ``SCAN_CHUNK`` at a time and stops at ``SCAN_BUDGET`` rows, so a
search that matches few tasks of a big table answers with what it found in
the newest rows and where to go on from (the next page), rather than reading
the whole table in one request. :func:`chunks` reads on to the end, a chunk
a statement, for the bulk actions (operations/bulk.py).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import F, Func, Q, QuerySet, TextField, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_bgtasks.conf import conf
from django_bgtasks.db import read_database
from django_bgtasks.limits import MAX_FLOW_KEY_LENGTH
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.validation import check_text

# How many rows of the indexed terms one statement of a scan reads.
SCAN_CHUNK = 1_000
# How many a page's scan reads at most before it answers with what it found:
# 0.41-0.53 s a page on PostgreSQL (docs/benchmarks.md, "Search terms"); the
# admin's list and its filters' counts may read two such scans.
SCAN_BUDGET = 50_000
# An error text or an argument's JSON: long enough for any search, short
# enough that nobody pastes a traceback's megabyte into a LIKE.
MAX_SEARCH_LENGTH = 1_000

_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_args(text: object) -> Any:
    """The JSON value of ``text``: what a task's arguments must contain."""
    text = check_text("args", text, MAX_SEARCH_LENGTH)
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError(
            f'args must be JSON: an object of keyword arguments ({{"user_id": 5}}), '
            f"an array of positional ones ([5]) or one value, not {text!r}"
        ) from None


def parse_error(text: object) -> str:
    """The text an error must contain."""
    return check_text("error", text, MAX_SEARCH_LENGTH)


def parse_key(text: object) -> str:
    """A concurrency or rate key."""
    return check_text("key", text, MAX_FLOW_KEY_LENGTH)


def parse_time(name: str, text: object) -> dt.datetime | dt.timedelta:
    """``since``'s or ``until``'s time: an aware datetime, or an age (a
    ``timedelta`` before the database's clock, resolved by :func:`resolve`)."""
    if isinstance(text, dt.datetime):
        return text if timezone.is_aware(text) else timezone.make_aware(text)
    text = check_text(name, text, 64)
    if match := _AGE.match(text):
        return dt.timedelta(**{_UNITS[match[2]]: float(match[1])})
    try:
        moment = parse_datetime(text)
    except ValueError:
        moment = None
    if moment is None:
        raise ValueError(
            f"{name} must be an ISO 8601 time (2026-12-06T14:00:00+00:00) or an age "
            f"(90s, 30m, 2h, 7d), not {text!r}"
        )
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def resolve(
    since: dt.datetime | dt.timedelta | None, until: dt.datetime | dt.timedelta | None
) -> tuple[dt.datetime | None, dt.datetime | None]:
    """``since`` and ``until`` as times, an age counted back from the
    database's clock (read once, only when one is an age), and checked to be
    in order: a range that ends before it starts is a ``ValueError``."""
    if isinstance(since, dt.timedelta) or isinstance(until, dt.timedelta):
        now = BackgroundTask.objects.work.clock()
        since = now - since if isinstance(since, dt.timedelta) else since
        until = now - until if isinstance(until, dt.timedelta) else until
    if since is not None and until is not None and until < since:
        raise ValueError(
            f"The time range is backwards: until ({until.isoformat()}) is before "
            f"since ({since.isoformat()})."
        )
    return since, until


def args_condition(queryset: QuerySet[QueuedTask], wanted: Any) -> QuerySet[QueuedTask]:
    """``queryset``'s tasks whose arguments contain ``wanted`` (see the module)."""
    positional = None if isinstance(wanted, dict) else _as_list(wanted)
    stored = {"kwargs": wanted} if positional is None else {"args": positional}
    if connections[conf.DATABASE].features.supports_json_field_contains:
        return queryset.filter(args_kwargs__contains=stored)
    if positional is None:  # each keyword's value, read by its JSON path
        for n, (key, value) in enumerate(wanted.items()):
            kwarg = KeyTransform(key, KeyTransform("kwargs", "args_kwargs"))
            queryset = queryset.alias(**{f"bgtasks_kwarg_{n}": kwarg})
            queryset = queryset.filter(**{f"bgtasks_kwarg_{n}": value})
        return queryset
    # The positional ones as compact JSON text (json_extract writes it so),
    # each element's text between two of its delimiters.
    extracted = Func(F("args_kwargs"), Value("$.args"), function="json_extract")
    queryset = queryset.alias(bgtasks_args=Cast(extracted, TextField()))
    for value in positional:
        piece = json.dumps(value, separators=(",", ":"))
        between = [f"[{piece},", f",{piece},", f"[{piece}]", f",{piece}]"]
        condition = Q()
        for delimited in between:
            condition |= Q(bgtasks_args__contains=delimited)
        queryset = queryset.filter(condition)
    return queryset


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def error_condition(text: str) -> Q:
    """Tasks whose errors (their JSON as text) contain ``text``, in any case."""
    return Q(bgtasks_errors__icontains=text)


def with_error_text(queryset: QuerySet[QueuedTask]) -> QuerySet[QueuedTask]:
    """``queryset`` with the errors as text, for :func:`error_condition`."""
    return queryset.alias(bgtasks_errors=Cast("errors", TextField()))


def key_condition(key: str) -> Q:
    """Tasks whose concurrency or rate key is ``key``."""
    return Q(concurrency_key=key) | Q(rate_key=key)


def time_condition(since: dt.datetime | None, until: dt.datetime | None) -> Q:
    """Tasks that finished (or, unfinished, were enqueued) within the range."""
    bounds: dict[str, dt.datetime] = {}
    if since is not None:
        bounds["bgtasks_at__gte"] = since
    if until is not None:
        bounds["bgtasks_at__lte"] = until
    return Q(**bounds)


def with_time(queryset: QuerySet[QueuedTask]) -> QuerySet[QueuedTask]:
    """``queryset`` with each task's time for :func:`time_condition`."""
    return queryset.alias(bgtasks_at=Coalesce("finished_at", "enqueued_at"))


@dataclass(frozen=True, slots=True)
class Scan:
    """What a scan found: the matching ``rows``, newest first, and the ``seq``
    of the last row it read (``None``: it read to the end of the indexed
    rows), from which the next scan goes on; ``read``, how many it read."""

    rows: list[QueuedTask]
    last_read: int | None
    read: int


def scan(
    indexed: QuerySet[QueuedTask],
    matching: Any,
    *,
    before: int | None,
    wanted: int,
    budget: int | None = None,
) -> Scan:
    """The first ``wanted`` rows of ``indexed`` (newest first, below ``before``)
    that ``matching`` (a queryset's filter: QueuedFilter.match) keeps, reading
    ``SCAN_CHUNK`` rows of ``indexed`` a statement and at most ``budget``
    (``SCAN_BUDGET``); the matching rows of a chunk are read by their ``seq``
    (its primary key)."""
    budget = SCAN_BUDGET if budget is None else budget
    found: list[QueuedTask] = []
    read = 0
    for seqs in _indexed_chunks(indexed, before):
        read += len(seqs)
        chosen = matching(QueuedTask.objects.using(read_database.alias()).filter(seq__in=seqs))
        found += chosen.order_by("-seq")[: wanted - len(found)]
        if len(found) >= wanted:
            return Scan(found, found[-1].seq, read)
        if len(seqs) < SCAN_CHUNK:
            return Scan(found, None, read)
        if read >= budget:
            return Scan(found, seqs[-1], read)
    return Scan(found, None, read)


def scan_seqs(
    indexed: QuerySet[QueuedTask], matching: Any, *, wanted: int
) -> tuple[list[int], bool]:
    """As :func:`scan` from the newest row, the ``seq`` of each match alone (at
    most ``wanted``), and whether the scan read every row of ``indexed``."""
    found: list[int] = []
    read = 0
    for seqs in chunks(indexed, matching):
        read += SCAN_CHUNK
        found += seqs[: wanted - len(found)]
        if len(found) >= wanted or read >= SCAN_BUDGET:
            return found, False
    return found, True


def chunks(indexed: QuerySet[QueuedTask], matching: Any) -> Iterator[list[int]]:
    """The ``seq`` of every row of ``indexed`` that ``matching`` keeps, newest
    first, a list a chunk of ``SCAN_CHUNK`` rows read (an empty list for a
    chunk where none matched): the bulk actions' reads, to the end."""
    for seqs in _indexed_chunks(indexed, None):
        chosen = matching(QueuedTask.objects.using(read_database.alias()).filter(seq__in=seqs))
        yield list(chosen.order_by("-seq").values_list("seq", flat=True))


def _indexed_chunks(indexed: QuerySet[QueuedTask], before: int | None) -> Iterator[list[int]]:
    """The ``seq`` of ``indexed``'s rows below ``before``, newest first,
    ``SCAN_CHUNK`` a statement (a keyset read of the filter's index)."""
    while True:
        rows = indexed if before is None else indexed.filter(seq__lt=before)
        with QueuedTask.objects.index_reads():
            seqs = list(rows.order_by("-seq").values_list("seq", flat=True)[:SCAN_CHUNK])
        if not seqs:
            return
        yield seqs
        if len(seqs) < SCAN_CHUNK:
            return
        before = seqs[-1]
