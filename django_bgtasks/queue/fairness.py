"""A Django Task's fair share, as ``@task(...)`` declares it on
:class:`~django_bgtasks.queue.backend.LeaseTask`: ``fairness_key=`` keys its
tasks (a tenant, an account), and among ready tasks of equal priority the
claim takes from the keys in turn, the key whose turn is oldest first, so
that every key with ready work gets an equal share of the workers and a lone
key gets all of them. ``fairness_weight=`` gives a key more than one share
(a paid tier): a mapping of keys to whole numbers (the keys it doesn't name
weigh 1), or a callable that takes the key and returns one.

The key is formed as the flow limits' keys are (:mod:`~django_bgtasks.queue.keys`):
a format string over the task's arguments by parameter name
(``"tenant:{tenant_id}"``), or a callable taking the arguments. Without a
key a task has no share of its own. :func:`check_task` refuses a bad
declaration with the reason (at ``@task(...)``, as ``InvalidTask``);
:func:`share` forms one task's key and weight from its arguments (a
``TypeError`` when they can't form them, before any SQL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django_bgtasks import limits
from django_bgtasks.queue.keys import check_key, form_key


def check_weight(value: object) -> int:
    """A key's weight: a whole number from 1 to ``limits.MAX_FAIRNESS_WEIGHT``;
    a ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"a fairness weight must be a whole number, not {value!r}")
    if not 1 <= value <= limits.MAX_FAIRNESS_WEIGHT:
        raise ValueError(
            f"a fairness weight must be from 1 to {limits.MAX_FAIRNESS_WEIGHT}, not {value}"
        )
    return value


def check_task(task: Any) -> None:
    """A ``ValueError`` saying what is wrong with ``task``'s fair share: a
    weight without a key, a key that is neither a format string over the
    function's parameters nor a callable, or a weight that is neither a
    mapping of keys to weights nor a callable (a mapping's weights are
    checked here; a callable's at each enqueue)."""
    key = getattr(task, "fairness_key", None)
    weight = getattr(task, "fairness_weight", None)
    if key is None:
        if weight is not None:
            raise ValueError("fairness_weight needs fairness_key= too: it weighs that key's share")
        return
    check_key("fairness_key", key, task.func)
    if weight is None or callable(weight):
        return
    if not isinstance(weight, Mapping):
        raise ValueError(
            "fairness_weight must be a mapping of keys to whole numbers or a callable "
            f"taking the key, not {weight!r}"
        )
    for named, value in weight.items():
        if not isinstance(named, str):
            raise ValueError(f"fairness_weight's keys must be strings, not {named!r}")
        try:
            check_weight(value)
        except ValueError as exc:
            raise ValueError(f"fairness_weight of key {named!r}: {exc}") from None


def share(task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, int] | None:
    """The fairness key and weight of one task of ``task`` with these
    arguments, or ``None`` when ``task`` declares no key. A ``TypeError``
    naming the option when the arguments can't form the key, or the
    callable weight gives no whole number in range."""
    key = getattr(task, "fairness_key", None)
    if key is None:
        return None
    formed = form_key("fairness_key", key, task, args, kwargs)
    weight = getattr(task, "fairness_weight", None)
    if weight is None:
        return formed, 1
    if not callable(weight):
        return formed, weight.get(formed, 1)
    try:
        value = weight(formed)
    except Exception as exc:
        raise TypeError(
            f"the fairness_weight of task {task.module_path!r} raised "
            f"{type(exc).__name__} for key {formed!r}: {exc}"
        ) from None
    try:
        return formed, check_weight(value)
    except ValueError as exc:
        raise TypeError(
            f"the fairness_weight of task {task.module_path!r} for key {formed!r}: {exc}"
        ) from None


__all__ = ["check_task", "check_weight", "share"]
