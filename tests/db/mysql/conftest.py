"""What the tests of db/mysql/ share: ``mysql_queue_alias``, the MariaDB
alias run each way MySQL's driver (db/mysql/driver.py) can run the queue's
statements there: MariaDB's own with its procedures or as text, and MySQL's,
each with several statements a query or one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_bgtasks.db.mysql import leases as mysql
from django_bgtasks.db.mysql import routines as mariadb_routines


@pytest.fixture(
    params=[
        ("mariadb", True, True),
        ("mariadb", True, False),
        ("mysql", True, False),
        ("mysql", False, False),
    ],
    ids=["mariadb", "mariadb-as-text", "mysql-one-round-trip", "mysql-multi-statements-off"],
)
def mysql_queue_alias(
    request: pytest.FixtureRequest, mysql_alias: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The MariaDB alias, its connection with or without several statements
    per query; as MariaDB, its claims and ends as procedures
    (db/mysql/routines.py) or as text (where a procedure can't be had), or
    taken for MySQL (the statements MySQL runs where they differ: MariaDB
    runs them too)."""
    dialect, multi, routines = request.param
    connection = connections[mysql_alias]
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    if not multi:
        options["multi_statements"] = False
    if dialect == "mariadb" and not routines:
        refused = {mariadb_routines._database(connection)}
        monkeypatch.setattr(mariadb_routines, "_REFUSED", refused)
    try:
        connection.ensure_connection()
        if dialect == "mariadb" and not connection.mysql_is_mariadb:
            pytest.skip("BGTASKS_MYSQL_URL is MySQL: MariaDB's statements can't run there")
        if dialect == "mysql":
            connection.mysql_is_mariadb = False  # (Django's cached_property)
        assert mysql.multi_statements(connection) is multi
        with CaptureQueriesContext(connection) as queries:
            yield mysql_alias
        # Claims and ends sent one way only: their CALLs, or their text (a
        # claim's pick reads this index; MariaDB keeps the ends in this
        # variable). A recovery and a give-back are text either way.
        sent = [q["sql"] for q in queries.captured_queries if "CREATE PROCEDURE" not in q["sql"]]
        text = ("FORCE INDEX (bgtasks_queued_claim)", "SET @bgtasks_ends")
        other_way = text if routines else ("CALL bgtasks_",)
        assert not [sql for sql in sent if any(mark in sql for mark in other_way)]
    finally:
        options.pop("multi_statements", None)
        vars(connection).pop("mysql_is_mariadb", None)
        connection.close()
