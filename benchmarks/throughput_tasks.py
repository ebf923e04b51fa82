"""The Django Tasks that benchmarks/tasks_throughput.py enqueues, a pair on
each backend it compares (a module of its own, so that every worker process
imports them by the same path): ``noop_<alias>`` for the drains, and
``stamp_<alias>(path)``, which writes when it started to a file of its own,
for the latency from enqueue to start.

Only the aliases in ``settings.TASKS`` get theirs: Django checks a task
against its backend when it is made, and a peer not installed has none.

With ``BENCH_TASK_SECONDS`` (``drain_ab.py --task-seconds``), each
``noop`` task sleeps that long: tasks that are short, but not empty.

Ours also have a twin under the alias ``bgtasks_limits`` (the same
``bgtasks`` backend): ``noop_bgtasks_limits`` and ``stamp_bgtasks_limits``,
declared with flow limits that never bind, ``concurrency=10_000`` and
``rate_limit="10000/s"`` (one key each, the task's path), both far above
what the workers run or start: ``tasks_throughput.py --limits`` runs them
beside the plain ones, for what declaring limits costs.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.conf import settings

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]

NOOP: dict[str, Any] = {}
LIMIT = 10_000  # the twins' concurrency and starts a second
STAMP: dict[str, Any] = {}


# (Read once: the workers' tasks run millions of times.)
_SECONDS = float(os.environ.get("BENCH_TASK_SECONDS") or 0)


def _noop() -> None:
    """Does nothing; sleeps ``BENCH_TASK_SECONDS`` if set."""
    if _SECONDS:
        time.sleep(_SECONDS)


def _stamp(path: str) -> None:
    """Writes time.time() to ``path`` as it starts: to a file of its own
    first, renamed after, so the benchmark never reads half a number."""
    now = time.time()
    with open(path + ".part", "w") as file:
        file.write(repr(now))
    os.replace(path + ".part", path)


def _define(alias: str, kind: str, function: Any, into: dict[str, Any], **limits: Any) -> None:
    # The worker finds a task by its module path, module plus qualname: each
    # copy gets a name of its own, bound at module level.
    def body(*args: Any) -> None:
        function(*args)

    name = f"{alias}_limits" if limits else alias
    body.__name__ = body.__qualname__ = f"{kind}_{name}"
    body.__doc__ = function.__doc__
    globals()[body.__name__] = into[name] = task(backend=alias, **limits)(body)


for _alias in settings.TASKS:
    if _alias != "default":
        _define(_alias, "noop", _noop, NOOP)
        _define(_alias, "stamp", _stamp, STAMP)
if "bgtasks" in settings.TASKS:
    for _kind, _function, _into in (("noop", _noop, NOOP), ("stamp", _stamp, STAMP)):
        _define("bgtasks", _kind, _function, _into, concurrency=LIMIT, rate_limit=f"{LIMIT}/s")
