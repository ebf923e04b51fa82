"""Public names have docstrings: everything ``django_bgtasks`` exports, and
every public method and property of the classes docs/api.md documents.

ruff's D1 rules cover the package's modules, classes and functions; methods
are checked here, for the API, because on the admin and command classes they
are Django's hooks, which Django documents.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import django_bgtasks
from django_bgtasks.background.functions import BackgroundTaskFunction
from django_bgtasks.core.leases import LeaseManager, RunQuerySet, TaskState
from django_bgtasks.core.requests import OperatorRequests
from django_bgtasks.core.runner import RunningLease

API_CLASSES = [
    LeaseManager,
    OperatorRequests,  # BackgroundTask.objects' operator operations and reads
    RunQuerySet,
    RunningLease,
    TaskState,
    BackgroundTaskFunction,
]


def public_members(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, staticmethod | classmethod):
            member = member.__func__
        if isinstance(member, property) and member.fget is not None:
            yield name, member.fget
        elif inspect.isfunction(member):
            yield name, member


@pytest.mark.parametrize("name", django_bgtasks.__all__)
def test_every_exported_name_has_a_docstring(name: str) -> None:
    assert (getattr(django_bgtasks, name).__doc__ or "").strip()


@pytest.mark.parametrize("cls", API_CLASSES, ids=lambda cls: cls.__name__)
def test_every_public_method_of_the_api_has_a_docstring(cls: type) -> None:
    members = dict(public_members(cls))
    assert members, f"{cls.__name__} has no public methods to check"
    undocumented = [name for name, func in members.items() if not (func.__doc__ or "").strip()]
    assert undocumented == []
