"""MariaDB's stored procedures for the queue's hottest writes: a claim and a
round's ends (``claim`` and ``finish_many``, and so ``finish_and_claim``),
each the same steps as its text in :mod:`~django_bgtasks.db.mysql.mariadb`.

Why. MariaDB parses a query's text every time it is sent, compound
statements and all: a claim and its ends are about ten statements, three of
them compound, and the parsing was a sixth of the server's CPU in a drain
(docs/benchmarks.md, "MariaDB: no file a claim"). A procedure's body is
parsed once per connection (the session's routine cache), and the round
sends ``CALL name(...)`` instead: 25-37 % less of the server's CPU a round on
one connection (docs/benchmarks.md, "MariaDB: the hot writes as stored
procedures").

How. Each procedure is named by a hash of its parameters and body, so a
changed statement is a new procedure, and processes of the old release and
the new one (a rolling deploy) each call their own. A process creates the one it
needs at the first write that uses it (``CREATE PROCEDURE IF NOT EXISTS``,
outside any transaction, since DDL commits), and remembers that it exists.
The procedure runs with its caller's privileges (``SQL SECURITY INVOKER``).

Where a procedure can't be had (a user without ``CREATE ROUTINE``, or without
``EXECUTE`` on one another user created), the process logs why once and
sends the text, as before: the same steps, the same result. A procedure
dropped under a running process (a database restored, say, or
``manage.py bgtasks procedures --drop`` after a deploy: :func:`ours`) is
created again at the next write. MySQL keeps its text: its statements are
not MariaDB's, and it has no server here to test one on.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from django_bgtasks.db.mysql.leases import MYSQL_STEP

logger = logging.getLogger("django_bgtasks.db")

# The statements run as procedures: the workers' claims and ends, sent once
# a round by every queue worker. The others (a recovery once a second, an
# enqueue of one INSERT, an operator's cancel) are not worth a procedure.
ROUTINE_STATEMENTS = frozenset({"claim", "finish_many"})

# Each parameter's type in a procedure. Strings compare in utf8mb4_bin, as
# the text compares them (MariaDB's rule: a _bin collation beside a _ci one
# of the same character set wins); a parameter not named here is refused
# when the procedure is rendered, not at its first CALL.
_TYPES = {
    "owner": "VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "all": "BOOLEAN",
    "queues": "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "limit": "INT",
    "ends": "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
}
# Every procedure's name starts so (:func:`ours` finds them by it).
PREFIX = "bgtasks_"
_PARAM = re.compile(r"%\((\w+)\)s")
# The server's errors for a procedure that is not there, and for a caller
# without EXECUTE on it; and those that refuse a user its CREATE (no CREATE
# ROUTINE on the database, no such privilege, binary logging without SUPER).
# Any other error of a CREATE (the server gone, say) is the caller's, as an
# error of the write it came before would be.
_MISSING, _NO_EXECUTE = 1305, 1370
_NO_CREATE = frozenset({1044, 1142, 1227, 1419})
# A DROP refused the user: without ALTER ROUTINE, the server's 1370 for the
# routine (or 1044 for the database).
_NO_DROP = _NO_CREATE | {_NO_EXECUTE}


class Routine:
    """The procedure of one rendered statement: its name, its ``CREATE``, and
    the ``CALL`` that runs it with the statement's own parameters."""

    def __init__(self, statement: str, query: str) -> None:
        names = sorted(set(_PARAM.findall(query)))
        unknown = [name for name in names if name not in _TYPES]
        if unknown:
            raise ValueError(f"{statement}: no procedure type for the parameters {unknown}")
        body = _PARAM.sub(r"p_\1", query).replace("%%", "%")
        # Inside a stored program a block is atomic or not by its handlers:
        # NOT ATOMIC is the syntax of a block sent on its own.
        body = body.replace("BEGIN NOT ATOMIC", "BEGIN")
        steps = ";\n".join(step.strip() for step in body.split(MYSQL_STEP))
        arguments = ", ".join(f"IN p_{name} {_TYPES[name]}" for name in names)
        # The hash of the parameters too: a CALL must match them.
        digest = hashlib.sha256(f"{arguments}\n{steps}".encode()).hexdigest()[:16]
        self.name = f"{PREFIX}{statement}_{digest}"
        self.create = (
            f"CREATE PROCEDURE IF NOT EXISTS {self.name}({arguments})"
            f" MODIFIES SQL DATA SQL SECURITY INVOKER\nBEGIN\n{steps};\nEND"
        )
        self.call = f"CALL {self.name}({', '.join(f'%({name})s' for name in names)})"


# Rendered once per statement text, as the statements themselves are.
_ROUTINES: dict[tuple[str, str], Routine] = {}
# The names of the procedures this process knows exist, by database, and
# the databases where they can't be had. A database is its server and name:
# every connection to it sees the same procedures.
_CREATED: dict[tuple[str, ...], set[str]] = {}
_REFUSED: set[tuple[str, ...]] = set()


def _database(connection: BaseDatabaseWrapper) -> tuple[str, ...]:
    settings = connection.settings_dict
    return (str(settings["HOST"]), str(settings["PORT"]), str(settings["NAME"]))


def routine(connection: BaseDatabaseWrapper, statement: str, query: str) -> Routine | None:
    """The procedure that runs ``query`` (the rendered ``statement``) on
    ``connection``, created first if this process has not seen it there;
    ``None`` where it runs as text: on MySQL, for a statement not in
    :data:`ROUTINE_STATEMENTS`, inside ``atomic()`` (``CREATE PROCEDURE``
    commits) and where a procedure can't be had."""
    if (
        statement not in ROUTINE_STATEMENTS
        or not connection.mysql_is_mariadb  # type: ignore[attr-defined]
        or connection.in_atomic_block
    ):
        return None
    database = _database(connection)
    if database in _REFUSED:
        return None
    key = (statement, query)
    if key not in _ROUTINES:
        _ROUTINES[key] = Routine(statement, query)
    found = _ROUTINES[key]
    if found.name in _CREATED.get(database, ()):
        return found
    try:
        with connection.cursor() as cursor:
            cursor.execute(found.create)
    except DatabaseError as error:
        if _code(error) not in _NO_CREATE:
            raise
        _refuse(connection, error)
        return None
    _CREATED.setdefault(database, set()).add(found.name)
    return found


def routines(
    connection: BaseDatabaseWrapper, statements: Sequence[str], queries: Sequence[str]
) -> list[Routine | None]:
    """:func:`routine` of each of ``queries`` (the rendered ``statements``)."""
    return [routine(connection, *each) for each in zip(statements, queries, strict=True)]


def forget(connection: BaseDatabaseWrapper, error: BaseException) -> bool:
    """After ``error`` in a transaction that called procedures, rolled back:
    whether to run it again, because a procedure was missing (forgotten, so
    the next :func:`routine` creates it) or may not be called here (this
    database then runs the text)."""
    code = _code(error)
    if code == _MISSING:
        _CREATED.pop(_database(connection), None)
        return True
    if code == _NO_EXECUTE:
        _refuse(connection, error)
        return True
    return False


def _code(error: BaseException) -> object:
    """The server's error number of ``error``, if it is a database error."""
    return error.args[0] if isinstance(error, DatabaseError) and error.args else None


def _refuse(connection: BaseDatabaseWrapper, error: BaseException) -> None:
    _REFUSED.add(_database(connection))
    logger.warning(
        "django-bgtasks: database %r: no stored procedure for the queue's claims and ends"
        " (%s); they run as text, at more of the server's CPU a round (docs/install.md)",
        connection.alias,
        error,
    )


def ours(connection: BaseDatabaseWrapper, *, drop: bool = False) -> list[str]:
    """The names of the queue's procedures in ``connection``'s database,
    sorted; with ``drop``, those procedures are dropped too. Dropping is
    safe at any time: a process that calls one again creates it again, and
    runs the round it was missing for again (rolled back, so nothing is
    written twice). A ``ValueError`` on another engine, which has none, for
    ``drop`` inside ``atomic()``, since a ``DROP`` commits, and for a user
    the server refuses a ``DROP`` (no ``ALTER ROUTINE``), naming those
    dropped before it, if any. The names are those the user may see:
    MariaDB shows a user only the procedures it has a privilege on."""
    vendor = connection.vendor
    if vendor != "mysql" or not connection.mysql_is_mariadb:  # type: ignore[attr-defined]
        name = "MySQL" if vendor == "mysql" else connection.display_name
        raise ValueError(
            f"database {connection.alias!r} is {name}: the queue has stored procedures "
            'only on MariaDB (docs/install.md, "Stored procedures").'
        )
    if drop and connection.in_atomic_block:
        raise ValueError(
            "the procedures can't be dropped inside atomic(): a DROP PROCEDURE commits."
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA ="
            " DATABASE() AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME LIKE %s"
            " ORDER BY ROUTINE_NAME",
            [PREFIX.replace("_", "\\_") + "%"],
        )
        names = [name for (name,) in cursor.fetchall()]
        if drop:
            _drop(connection, cursor, names)
    return names


def _drop(connection: BaseDatabaseWrapper, cursor: CursorWrapper, names: list[str]) -> None:
    """Drop the procedures ``names``, one statement each (MariaDB drops one a
    statement); this process forgets those it knew of, so that its next
    write creates them again rather than finding one missing."""
    dropped: list[str] = []
    try:
        for name in names:
            cursor.execute(f"DROP PROCEDURE IF EXISTS {connection.ops.quote_name(name)}")
            dropped.append(name)
    except DatabaseError as error:
        if _code(error) not in _NO_DROP:
            raise
        raise ValueError(
            f"the server refused to drop {name} ({error}): dropping needs the ALTER ROUTINE"
            f" privilege; dropped before it: {', '.join(dropped) or 'none'}."
        ) from None
    finally:
        _CREATED.pop(_database(connection), None)
