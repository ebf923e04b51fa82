"""Time arithmetic in each vendor's own SQL, for the queries that count
finished tasks by the thousand (queue/rollup.py): the seconds between two
of a row's times (:class:`Seconds`), and a time's minute (:class:`MinuteUTC`).

Django's ``F("finished_at") - F("started_at")`` says the same on every
vendor, but on SQLite it is a Python function called for each row each
time the expression appears (and parses both timestamps there): the
rollup's run-time buckets took 16 s for 60,000 tasks. Here each vendor
computes it in its engine: PostgreSQL's ``EXTRACT(EPOCH FROM ...)``,
MySQL/MariaDB's ``TIMESTAMPDIFF`` in microseconds, and SQLite's
``julianday()`` difference (its double keeps about 50 microseconds at
today's dates: finer than the 1 ms of the rollup's smallest bucket).

Django's ``TruncMinute`` is likewise a Python function on SQLite (it
converts each value between time zones there): 2.7 s of 3.0 s for a minute
of 60,000 ends. The rollup's minutes are UTC's, and SQLite's stored times
are UTC text, so there a minute is the text cut at its seconds.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import FloatField, Func
from django.db.models.functions import TruncMinute

Compiled = tuple[str, list[Any]]


class Seconds(Func):
    """``Seconds("started_at", "finished_at")``: the second time less the
    first, in seconds (a float); ``NULL`` when either is."""

    arity = 2
    output_field = FloatField()

    def _compiled(self, compiler: Any) -> tuple[Compiled, Compiled]:
        start, end = (compiler.compile(part) for part in self.get_source_expressions())
        return (start[0], list(start[1])), (end[0], list(end[1]))

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Compiled:
        (start, first), (end, second) = self._compiled(compiler)
        return f"EXTRACT(EPOCH FROM ({end} - {start}))::float8", [*second, *first]

    def as_mysql(self, compiler: Any, connection: Any, **extra: Any) -> Compiled:
        (start, first), (end, second) = self._compiled(compiler)
        return f"TIMESTAMPDIFF(MICROSECOND, {start}, {end}) / 1000000.0", [*first, *second]

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Compiled:  # type: ignore[override]
        (start, first), (end, second) = self._compiled(compiler)
        return f"(julianday({end}) - julianday({start})) * 86400.0", [*second, *first]

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Compiled:  # type: ignore[override]
        raise NotImplementedError(f"Seconds has no SQL for {connection.vendor}")


class MinuteUTC(TruncMinute):
    """``MinuteUTC("finished_at")``: the UTC minute the time is in, as an
    aware datetime: Django's ``TruncMinute`` in UTC, but on SQLite in its own
    ``strftime()`` (Django's stored text is UTC there)."""

    def __init__(self, expression: Any, **extra: Any) -> None:
        super().__init__(expression, tzinfo=dt.UTC, **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Compiled:  # type: ignore[override]
        sql, params = compiler.compile(self.lhs)
        # (%% is a literal % in Django's SQL; SQLite's cursor wrapper turns it back.)
        return f"strftime('%%Y-%%m-%%d %%H:%%M:00', {sql})", list(params)
