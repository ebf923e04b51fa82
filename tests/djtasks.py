"""Django Tasks for tests/queue/test_backend.py and tests/faults/test_backend_workers.py.

Plain module-level functions under ``@task``, written against Django's public
Tasks API only (``django.tasks`` or the backport, whichever is installed);
each test picks the backend with ``.using(backend=...)``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

try:
    from django.tasks import task
except ImportError:  # Django 5.2
    from django_tasks import task  # type: ignore[no-redef]

from django_bgtasks.backend import task_lease


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def fails(message: str) -> None:
    raise ValueError(message)


@task
def returns_unencodable() -> object:
    return object()


@task(takes_context=True)
def writes_then_returns_a_set(context: Any, alias: str, prefix: str) -> set[int]:
    """Write one row (a ``Counter`` named after ``prefix`` and the attempt),
    then return what JSON can't encode: the work is done, the value is not."""
    from tests.testapp.models import Counter

    Counter.objects.using(alias).create(name=f"{prefix}-{context.attempt}")
    return {1, 2}


@task(takes_context=True)
def with_context(context: Any, n: int) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "n": n}


@task
async def add_async(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(takes_context=True)
def fails_first(context: Any) -> int:
    """Fails on the first attempt, succeeds on the next."""
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    return int(context.attempt)


@task(takes_context=True)
def progress(context: Any, steps: int) -> int:
    lease = task_lease(context)
    for step in range(steps):
        lease.update({"done": step + 1, "total": steps})
    return steps


@task
def record(path: str, key: str) -> str:
    """Append ``key`` to the file ``path`` (one write: atomic with O_APPEND)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return key


@task
def record_slowly(path: str, key: str, seconds: float) -> str:
    """:func:`record`, then take ``seconds``: a drain that lasts long enough
    for a fault to land mid-run."""
    record.call(path, key)
    time.sleep(seconds)
    return key


@task(takes_context=True)
def exits_first(context: Any, path: str) -> int:
    """Record the attempt; on the first, end the whole process with
    ``os._exit()`` (as the OOM killer would, nothing runs after it)."""
    record.call(path, f"attempt-{context.attempt}")
    if context.attempt == 1:
        os._exit(3)
    return int(context.attempt)


@task
def until_cancelled(path: str, seconds: float) -> str:
    """Say it started (in ``path``), then check for a cancel until ``seconds`` pass."""
    with open(path, "a") as out:
        out.write(f"started {os.getpid()}\n")
    lease = task_lease()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lease.check()
        time.sleep(0.05)
    return "not cancelled"


@task
def sleeps(path: str, seconds: float) -> str:
    """Say it started (in ``path``), then sleep without checking anything."""
    with open(path, "a") as out:
        out.write(f"started {os.getpid()}\n")
    time.sleep(seconds)
    return "slept"


@task
def runs_checking(path: str, key: str, seconds: float) -> dict[str, Any]:
    """Record this run (``key``, its token, attempt, process, and when its
    claim was sent: the tasks of one claim statement share it), then take
    ``seconds``, checking for a stop or a lost lease; return its token and
    owner, so that the row shows whose end was written."""
    lease: Any = task_lease()
    line = f"{key} {lease.token} {lease.attempt} {os.getpid()} {lease.claim.sent_at!r}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lease.check()
        time.sleep(0.02)
    return {"key": key, "token": lease.token, "owner": lease.owner}


def _tenant_of(path: str, key: str, seconds: float) -> str:
    """The tenant of ``runs_checking_in_turn``'s task ``key`` ("k7"): one of three."""
    return f"tenant:{int(key[1:]) % 3}"


@task(fairness_key=_tenant_of)
def runs_checking_in_turn(path: str, key: str, seconds: float) -> dict[str, Any]:
    """``runs_checking`` with a fair share among three tenants (the fault
    tests' batches: the claim's turns through a worker's fault)."""
    return runs_checking.func(path, key, seconds)  # type: ignore[no-any-return]


@task
def noop() -> None:
    return None


@task
def counts(name: str, *, leave_open: bool = False) -> str:
    """Write a ``Counter`` named ``name``; with ``leave_open``, after turning
    autocommit off, and return with that transaction still open, as a task
    with a bug may (Django's request cycle closes such a connection)."""
    from django.db import connection

    from tests.testapp.models import Counter

    if leave_open:
        connection.set_autocommit(False)
    Counter.objects.create(name=name)
    return name


@task(takes_context=True)
def sleeps_first(context: Any, path: str, seconds: float) -> int:
    """On the first attempt, say so in ``path`` and sleep ``seconds`` (long
    enough to be killed); on a later one, return the attempt at once."""
    if context.attempt == 1:
        with open(path, "a") as out:
            out.write(f"started {os.getpid()}\n")
        time.sleep(seconds)
    return int(context.attempt)


@task(unique=True)
def unique_record(path: str, key: str, seconds: float = 0.2) -> str:
    """``record``, as a unique task (one ready or running at a time), then sleep."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    time.sleep(seconds)
    return key


@task(lease_name="nightly-report")
def nightly_report() -> str:
    return "reported"


@task
def exits() -> None:
    raise SystemExit(3)


class Abandon(BaseException):
    """A task's own BaseException subclass (neither an Exception nor one of Python's)."""


BASE_EXCEPTIONS: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "GeneratorExit": GeneratorExit,
    "Abandon": Abandon,
}


@task
def raises_base_exception(kind: str) -> None:
    """Raise the ``BaseException`` named ``kind`` (a key of ``BASE_EXCEPTIONS``)."""
    raise BASE_EXCEPTIONS[kind](f"{kind} from the task")


# --- retries and timeouts (tests/faults/test_retries_and_timeouts.py) ----------------------


def _attempt_started(context: Any, path: str) -> None:
    """Record the attempt and when it began by the database's clock (its
    claim's ``last_attempted_at``)."""
    started = context.task_result.last_attempted_at.isoformat()
    record.call(path, f"attempt-{context.attempt} {started}")


@task(takes_context=True, max_attempts=4, retry_delay=0.2)
def fails_with_backoff(context: Any, path: str) -> None:
    """Fails every attempt: four of them (the backend's MAX_ATTEMPTS is 1),
    0.2, 0.4 and 0.8 s apart (+-10 %)."""
    _attempt_started(context, path)
    raise RuntimeError(f"attempt {context.attempt} fails")


@task(takes_context=True)
def fails_every_attempt(context: Any, path: str) -> None:
    """Fails every attempt, with no retry_delay of its own (on the "backoff"
    backend: three attempts, its RETRY_DELAY of 0.3 s doubling between them)."""
    _attempt_started(context, path)
    raise RuntimeError(f"attempt {context.attempt} fails")


@task(takes_context=True, max_attempts=1)
def fails_once_only(context: Any, path: str) -> None:
    """Fails, and is not retried on a backend whose MAX_ATTEMPTS is 3."""
    _attempt_started(context, path)
    raise RuntimeError("no retry")


@task(takes_context=True, timeout=0.5, max_attempts=2)
def checks_past_timeout(context: Any, path: str, seconds: float) -> str:
    """Checks every 20 ms for ``seconds``, far past its timeout."""
    _attempt_started(context, path)
    lease = task_lease(context)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lease.check()
        time.sleep(0.02)
    return "not timed out"


@task(takes_context=True, timeout=0.5, max_attempts=2)
def sleeps_past_timeout(context: Any, path: str, seconds: float) -> str:
    """Sleeps ``seconds`` without a check, far past its timeout, then says so
    and returns: an end that must come too late."""
    _attempt_started(context, path)
    time.sleep(seconds)
    record.call(path, f"late-{context.attempt}")
    return "late"


# Flow limits (tests/queue/test_flow.py, tests/faults/test_flow_workers.py):
# what each run did is read from its row (its start and end by the
# database's clock), not from these functions.
@task(concurrency=2, concurrency_key="account:{account}")
def per_account(account: str, seconds: float = 0.0) -> str:
    """At most two of one ``account`` at once; sleeps ``seconds``."""
    time.sleep(seconds)
    return account


@task(rate_limit="5/s")
def five_a_second(n: int) -> int:
    """At most five starts in any second."""
    return n


@task(rate_limit="2/h", rate_key=lambda account, n=0: f"mail:{account}")
def two_an_hour(account: str, n: int = 0) -> int:
    """At most two starts an hour per account (a callable key)."""
    return n


@task(concurrency=1, rate_limit="3/m", concurrency_key="{a}", rate_key="{b}")
def both_limits(a: str, b: str) -> str:
    """One of ``a`` at once, and three starts of ``b`` a minute."""
    return a + b


@task(concurrency=10_000, concurrency_key="{b}", rate_limit="10000/s", rate_key="{b}")
def limited_add(a: int, b: int) -> int:
    """``add`` with flow limits that don't bind (tests/queue/test_claim_reads.py):
    what declaring them costs a claim."""
    return a + b


@task(fairness_key="tenant:{b}")
def fair_add(a: int, b: int) -> int:
    """``add`` with a fair share of its ``b`` (tests/queue/test_claim_reads.py):
    what the turns of keys cost a claim."""
    return a + b
