"""``bgtasks procedures [--drop]``: on MariaDB, the queue's stored
procedures in ``BGTASKS_DATABASE`` (:func:`django_bgtasks.db.mysql.routines.ours`),
listed or dropped. A release whose claim or end statements changed leaves
the old ones behind (each is named by a hash of its body); dropping them all
is safe with workers running, since each creates the ones it calls again.
Another engine, or ``--drop`` inside ``atomic()``, is a ``CommandError``
(exit status 1), with nothing dropped; so is a ``DROP`` the server refuses
the user (no ``ALTER ROUTINE``), saying what was dropped before it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from django_bgtasks.conf import conf
from django_bgtasks.db.mysql import routines as mariadb_routines


def handle_procedures(command: BaseCommand, *, drop: bool, **_: Any) -> None:
    """The command's ``handle_procedures``: one name a line, or what was dropped."""
    connection = connections[conf.DATABASE]
    try:
        names = mariadb_routines.ours(connection, drop=drop)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    where = f"database {connection.alias!r}"
    if not names:
        command.stdout.write(
            f"No stored procedure of the queue in {where} (none this database user may see)."
        )
    elif not drop:
        command.stdout.write("\n".join(names))
    else:
        command.stdout.write(
            command.style.SUCCESS(
                f"Dropped {len(names)} stored procedure(s) of the queue from {where}: "
                f"{', '.join(names)}. A running worker creates the ones it calls again at "
                "its next claim or end."
            )
        )
