"""The keys a Django Task's options form from its arguments (queue/keys.py),
one rule for the flow limits' keys and the fairness key: what a declaration
may name, and what one task's arguments form. (Each option's own refusals,
through ``@task(...)``: tests/queue/test_flow.py, tests/queue/test_fairness.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from django_bgtasks import limits
from django_bgtasks.queue.keys import check_key, form_key


def job(account: str, n: int = 0, **extra: Any) -> None:
    """A task function: a positional parameter, a default and extra keywords."""


class _Task:
    """What form_key reads of a task: its function, its path, and whether it
    takes the context first."""

    module_path = "tests.queue.test_keys.job"
    takes_context = False
    func = staticmethod(job)


def test_a_declared_key_names_parameters_or_is_a_callable() -> None:
    for good in ("a:{account}", "{account}-{n}", "{region}", "plain", len):
        check_key("option", good, job)  # (job takes **extra: any name may be one of them)

    def fixed(account: str) -> None: ...

    with pytest.raises(ValueError, match="names 'region', which is not a parameter"):
        check_key("option", "{region}", fixed)
    with pytest.raises(ValueError, match=r"option '\{0\}' names the arguments by parameter name"):
        check_key("option", "{0}", fixed)
    with pytest.raises(ValueError, match="option must be a format string"):
        check_key("option", b"k", fixed)


def test_one_tasks_key_is_formed_from_its_arguments_with_their_defaults() -> None:
    task = _Task()
    assert form_key("option", None, task, ("a",), {}) == "tests.queue.test_keys.job"
    assert form_key("option", "{account}-{n}", task, ("a",), {}) == "a-0"
    assert form_key("option", "{account}-{n}", task, (), {"account": "b", "n": 2}) == "b-2"
    assert form_key("option", "{region}", task, ("a",), {"region": "eu"}) == "eu"
    assert form_key("option", lambda account, n=0: account.upper(), task, ("a",), {}) == "A"
    too_long = "x" * (limits.MAX_FLOW_KEY_LENGTH + 1)
    with pytest.raises(TypeError, match=f"not {limits.MAX_FLOW_KEY_LENGTH + 1} characters"):
        form_key("option", "{account}", task, (too_long,), {})
    with pytest.raises(TypeError, match="can't be formed from these arguments: KeyError"):
        form_key("option", "{region}", task, ("a",), {})
