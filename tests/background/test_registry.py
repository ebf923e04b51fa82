"""The ``@background_task`` functions registered in this process
(background/registry.py): by name, read back as registered, listed sorted;
a name is one function's (another under it is refused, the same one again
replaces itself, as when its module is imported twice)."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import pytest

from django_bgtasks import background_task
from django_bgtasks.background import registry


@dataclass(frozen=True)
class Entry:
    """What the registry reads of a task (``registry.Registered``)."""

    name: str
    func: Any
    ttl: float | None = None


def job(running: Any) -> None:
    """A task's function."""


def other(running: Any) -> None:
    """Another function."""


def test_two_functions_cannot_share_a_name() -> None:
    @background_task(name="t-dup")
    def first(running: Any) -> None: ...

    with pytest.raises(ValueError, match="already registered"):

        @background_task(name="t-dup")
        def second(running: Any) -> None: ...


def test_a_task_is_read_back_by_its_name_and_listed_sorted() -> None:
    assert registry.get("r-b") is None
    second, first = Entry("r-b", job), Entry("r-a", other)
    registry.add(second)
    registry.add(first)
    assert registry.get("r-b") is second and registry.get("r-a") is first
    listed = registry.registered()
    assert [name for name in listed if name.startswith("r-")] == ["r-a", "r-b"]
    assert list(listed) == sorted(listed)
    del listed["r-a"]  # a copy: the registry is unchanged
    assert registry.get("r-a") is first


def test_a_name_is_one_functions_and_the_same_function_again_replaces_itself() -> None:
    registry.add(Entry("r-job", job, ttl=30))
    with pytest.raises(ValueError, match=r"'r-job' is already registered by .*\.job; names must"):
        registry.add(Entry("r-job", other))
    assert registry.get("r-job") == Entry("r-job", job, ttl=30)
    # Its module imported again (under another name): a new function object,
    # the same function.
    again = types.FunctionType(job.__code__, job.__globals__)
    assert again is not job
    registry.add(Entry("r-job", again, ttl=60))
    assert registry.get("r-job") == Entry("r-job", again, ttl=60)
