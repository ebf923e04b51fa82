"""The flush that ends each transactional test: every table emptied by
``DELETE``, the content types and permissions kept.

Most of this suite's tests are transactional (``transaction=True``): the
leases are real commits seen from other connections and processes. Django's
``TransactionTestCase`` ends each one with ``manage.py flush``, which

* on PostgreSQL empties the tables with one ``TRUNCATE``, which makes new
  files for every table and index it names, and
* on every engine then sends ``post_migrate``, so that contenttypes and auth
  create again the content types and permissions it has just deleted.

In a CI run's first stage (3,219 tests, ``-n 4``, under coverage), Django's
flushes took 437 s of its 2,794 s of tests, 0.27 s a test on the machine's
PostgreSQL; this one's took 172 s (CONTRIBUTING.md, "How the suite runs").
Django's own suite avoids the same cost with ``available_apps``, which would
also swap the app registry at every test.

The rows of ``django_content_type`` and ``auth_permission`` are what
``migrate`` made, and no test writes them (tests/conftest.py's ``make_staff``
reads them), so they stay, with the ids every process has cached. Every other
table of the installed apps is emptied, in one transaction, so a test still
starts from what ``migrate`` left. A ``DELETE`` fires the tables' row
triggers (PostgreSQL's notifications, the flow slots freed), as Django's own
flush already does on SQLite and MySQL, where it is a ``DELETE`` too.
"""

from __future__ import annotations

from typing import Any

from django.core.management.color import no_style
from django.db import connections
from django.test import TransactionTestCase

KEPT = frozenset({"django_content_type", "auth_permission"})


def flush(alias: str) -> None:
    """Empty every table of the installed apps on ``alias`` but :data:`KEPT`."""
    connection = connections[alias]
    tables = [
        table
        for table in connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        if table not in KEPT
    ]
    if connection.vendor == "postgresql":
        # Django's foreign keys are DEFERRABLE INITIALLY DEFERRED: checked
        # at the commit, when every referencing row is gone too.
        quote = connection.ops.quote_name
        statements = [f"DELETE FROM {quote(table)}" for table in tables]
    else:
        # SQLite's and MySQL's flush without reset_sequences are DELETEs.
        statements = connection.ops.sql_flush(
            no_style(), tables, reset_sequences=False, allow_cascade=False
        )
    connection.ops.execute_sql_flush(statements)


_django_teardown = TransactionTestCase._fixture_teardown


def _fixture_teardown(self: Any) -> None:
    if self.available_apps is not None or self.serialized_rollback:
        # Django's own flush: it keeps what these two options promise.
        _django_teardown(self)
        return
    for alias in self._databases_names(include_mirrors=False):
        flush(alias)


def install() -> None:
    """Make every transactional test end with :func:`flush` (pytest-django
    builds its test cases on ``django.test.TransactionTestCase``), but one
    that sets ``available_apps`` or ``serialized_rollback``."""
    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[method-assign]
