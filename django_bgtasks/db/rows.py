"""The rows the statements of :mod:`django_bgtasks.db` hand back: one dict
per row, keyed by column name, on every vendor.

Callers read a row by the names its statement gives its columns (the column
lists of :mod:`django_bgtasks.db.shared` and the vendor modules alias every
expression), never by position, so a column added to or moved in a list
breaks no reader. :func:`named` builds them from a cursor's result, the one
place that does; MySQL's readers (:data:`django_bgtasks.db.mysql.leases.READERS`)
build the rows RETURNING would have given with the same names.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]

# The one column of a row that only says "this row matched" (``RETURNING 1
# AS matched``): its readers count rows, and never read it.
MATCHED = "matched"


def named(cursor: Any) -> list[Row]:
    """The rows of the statement just executed on ``cursor`` (any DB-API
    cursor, or Django's wrapper of one), each keyed by its column names."""
    values = cursor.fetchall()
    if not values:
        return []
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in values]


def matched(count: int) -> list[Row]:
    """``count`` rows of a write that returns only that it matched them."""
    return [{MATCHED: 1} for _ in range(count)]
