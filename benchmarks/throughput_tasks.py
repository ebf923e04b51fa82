"""The Django Tasks that benchmarks/tasks_throughput.py enqueues, a pair on
each backend it compares (a module of its own, so that every worker process
imports them by the same path): ``noop_<alias>`` for the drains, and
``stamp_<alias>(path)``, which writes when it started to a file of its own,
for the latency from enqueue to start.

Only the aliases in ``settings.TASKS`` get theirs: Django checks a task
against its backend when it is made, and a peer not installed has none.

With ``BENCH_TASK_SECONDS`` (``drain_ab.py --task-seconds``), each
``noop`` task sleeps that long: tasks that are short, but not empty.

With ``BENCH_LIMITS=1`` (``tasks_throughput.py --limits``), ours are
declared with flow limits that never bind: ``concurrency=10_000`` and
``rate_limit="10000/s"``, both far above what the workers run or start, so
what the drain measures is what declaring them costs.
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
LIMIT = 10_000  # BENCH_LIMITS' concurrency and starts a second
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


def _define(alias: str, kind: str, function: Any, into: dict[str, Any]) -> None:
    # The worker finds a task by its module path, module plus qualname: each
    # copy gets a name of its own, bound at module level.
    def body(*args: Any) -> None:
        function(*args)

    body.__name__ = body.__qualname__ = f"{kind}_{alias}"
    body.__doc__ = function.__doc__
    globals()[body.__name__] = into[alias] = task(backend=alias, **_limits(alias))(body)


def _limits(alias: str) -> dict[str, Any]:
    if alias == "bgtasks" and os.environ.get("BENCH_LIMITS") == "1":
        return {"concurrency": LIMIT, "rate_limit": f"{LIMIT}/s"}
    return {}


for _alias in settings.TASKS:
    if _alias != "default":
        _define(_alias, "noop", _noop, NOOP)
        _define(_alias, "stamp", _stamp, STAMP)
