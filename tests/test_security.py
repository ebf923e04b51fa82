"""The security review's claims, as tests (docs/security.md).

* No SQL is built from values: the package executes SQL in one place, the
  statements carry values only as parameters, and names made of SQL, format
  and placeholder syntax are stored as the text they are.
"""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest
from django.db import connections

from django_bgtasks import sql
from django_bgtasks.models import BackgroundTask, TaskRun
from tests.dbtools import runs

objects = BackgroundTask.objects
PACKAGE = Path(sql.__file__).parent

# --- no SQL built from values ------------------------------------------------------------

# The only parameters the statements take: every value goes through these.
PARAMETERS = {"name", "owner", "token", "value", "ttl", "outcome", "error"}


class _Calls(ast.NodeVisitor):
    """``<something>.execute(...)`` calls, by the function they are in."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.functions: list[str] = ["<module>"]
        self.found: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in (
            "execute",
            "executemany",
            "executescript",
            "raw",
            "extra",
        ):
            self.found.append(f"{self.where}:{self.functions[-1]}")
        self.generic_visit(node)


def _execute_calls() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        calls = _Calls(str(path.relative_to(PACKAGE)))
        calls.visit(ast.parse(path.read_text(), filename=str(path)))
        found += calls.found
    return found


def test_sql_is_executed_in_one_place_with_parameters() -> None:
    # leases._run runs the statements of sql.py; the migration runs its own
    # constant DDL. Nothing else in the package talks SQL.
    assert sorted(set(_execute_calls())) == [
        "leases.py:_run",
        "migrations/0002_lease_storage.py:run",
    ]


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_statements_take_values_only_as_named_parameters(vendor: str) -> None:
    templates, fragments = sql._BY_VENDOR[vendor]
    for field in fields(sql.Statements):
        # Rendered as sql.statements() does: fragments, then the table names.
        template = getattr(templates, field.name)
        text = template.format(**fragments, task="{task}", run="{run}").format(task="T", run="R")
        # Left after formatting: only %(param)s placeholders and literal %%.
        placeholders = set(re.findall(r"%\((\w+)\)s", text))
        assert placeholders <= PARAMETERS, (field.name, placeholders)
        stray = re.sub(r"%\(\w+\)s|%%", "", text)
        assert "%" not in stray, (field.name, text)
        assert "{" not in text and "}" not in text, (field.name, text)


HOSTILE_NAMES = [
    "x'); DROP TABLE django_bgtasks_backgroundtask; --",
    'x"; DELETE FROM django_bgtasks_taskrun; --',
    "%(name)s",
    "%s %% %d",
    "{task} {run}",
    "name' OR '1'='1",
    "<script>alert('x')",
    "<img src=x onerror=alert(1)>",
    "\\'; SELECT pg_sleep(10); --",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_names_made_of_sql_are_stored_as_text(db_alias: str, name: str) -> None:
    owner = f"owner {name}"[:200]
    lease = objects.try_claim(name, owner, {"said": name}, ttl=60)
    assert lease is not None
    assert objects.update_state(name, owner, {"said": name, "again": True}, token=lease.token)
    assert objects.release(name, owner, token=lease.token, error=name)
    assert objects.try_claim(name, owner, [name], ttl=60) is not None
    assert objects.request_cancel(name)
    assert objects.force_release(name)

    [state] = objects.list_states()
    assert (state.name, state.owner, state.value) == (name, owner, [name])
    assert [(run["name"], run["outcome"]) for run in runs(db_alias)] == [
        (name, "succeeded"),
        (name, "released-by-operator"),
    ]
    # The tables are all still there, with just this task's rows.
    tables = connections[db_alias].introspection.table_names()
    assert {BackgroundTask._meta.db_table, TaskRun._meta.db_table} <= set(tables)
    assert BackgroundTask.objects.using(db_alias).count() == 1
