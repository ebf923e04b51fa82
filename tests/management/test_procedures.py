"""``bgtasks procedures [--drop]`` (management/procedures.py): a clear error
on another engine than MariaDB; on the machine's MariaDB, the queue's
stored procedures one a line, and what ``--drop`` dropped and from where.
(The procedures themselves, and ``--drop`` under a running worker, inside
``atomic()`` or refused by the server: tests/db/mysql/test_routines.py.)"""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import BaseCommand
from django.db import connections

from django_bgtasks.db.mysql import routines as mariadb_routines
from django_bgtasks.management.procedures import handle_procedures
from django_bgtasks.models import QueuedTask
from tests import djtasks


def test_procedures_are_mariadbs_elsewhere_a_clear_error(refusal_alias: str) -> None:
    """``bgtasks procedures`` on SQLite: the queue has none there (MariaDB's
    are tested in tests/db/mysql/test_routines.py)."""
    for args in ([], ["--drop"]):
        with pytest.raises(
            CommandError,
            match=re.escape(
                f"database {refusal_alias!r} is SQLite: the queue has stored procedures only "
                "on MariaDB"
            ),
        ):
            call_command("bgtasks", "procedures", *args)


def said(*, drop: bool) -> str:
    """What ``handle_procedures`` writes, as the command's handler, uncoloured."""
    out = StringIO()
    handle_procedures(BaseCommand(stdout=out, no_color=True), drop=drop)
    return out.getvalue()


def test_the_queues_procedures_are_listed_one_a_line_and_drop_says_what_it_dropped(
    mysql_alias: str,
) -> None:
    connection = connections[mysql_alias]
    connection.ensure_connection()
    if not connection.mysql_is_mariadb:  # type: ignore[attr-defined]
        pytest.skip("BGTASKS_MYSQL_URL is MySQL, where the queue has no procedures")
    where = f"database {mysql_alias!r}"
    none = f"No stored procedure of the queue in {where} (none this database user may see).\n"
    said(drop=True)  # as a new deploy: none there, and this process knows of none
    assert said(drop=False) == none
    djtasks.add.enqueue(1, 2)
    claimed = QueuedTask.objects.finish_and_claim([], "w1", queues=None, limit=1)[1]
    assert len(claimed) == 1  # the claim created its procedure
    names = mariadb_routines.ours(connection)
    assert [name.rsplit("_", 1)[0] for name in names] == ["bgtasks_claim"]
    assert said(drop=False) == f"{names[0]}\n"
    assert said(drop=True) == (
        f"Dropped 1 stored procedure(s) of the queue from {where}: {names[0]}. "
        "A running worker creates the ones it calls again at its next claim or end.\n"
    )
    assert mariadb_routines.ours(connection) == []
    assert said(drop=True) == none
