"""The tasks ``bgtasks worker`` runs in the worker tests."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from typing import Any

from django.db import transaction

from django_bgtasks import RunningLease, WorkerStopping, background_task


@background_task(name="every-second", ttl=5, schedule=dt.timedelta(seconds=1))
def every_second(lease: RunningLease) -> None:
    """Runs every second for a moment; the test reads the slots from history."""
    time.sleep(0.2)
    lease.update({"pid": os.getpid()})


@background_task(name="slow-every-second", ttl=5, schedule=dt.timedelta(seconds=1))
def slow_every_second(lease: RunningLease) -> None:
    """Runs for 2.5 s every second, so the slots that come meanwhile are skipped."""
    for _ in range(25):
        time.sleep(0.1)
        lease.check()


@background_task(name="echo", ttl=10)
def echo(lease: RunningLease, n: int, pause: float = 0.05) -> dict[str, Any]:
    """Records the argument it was asked to run with."""
    time.sleep(pause)
    lease.update({"n": n, "pid": os.getpid()})
    return {"n": n}


@background_task(name="resumable", ttl=1.5, resume=True, max_attempts=5)
def resumable(lease: RunningLease, total: int = 60, pause: float = 0.1) -> None:
    """Counts to ``total``, a checkpoint per step, continuing from a lost run's."""
    start = (lease.resume_from or {}).get("done", 0)
    for done in range(start, total + 1):
        lease.update({"done": done, "total": total, "from": start, "pid": os.getpid()})
        time.sleep(pause)


@background_task(name="fenced-resumable", ttl=1.5, resume=True, max_attempts=5)
def fenced_resumable(lease: RunningLease, total: int = 80) -> None:
    """Like ``resumable``, with a fenced increment of a counter at each step."""
    from tests.procs import _ledger_increment

    done = (lease.resume_from or {}).get("done", 0)
    while done < total:
        time.sleep(0.1)
        with transaction.atomic():
            lease.fence()
            _ledger_increment("fenced-resumable", lease.owner, lease.token)
        done += 1
        print(f"step {lease.token} {done}", flush=True)
        lease.update({"done": done, "total": total, "pid": os.getpid()})


@background_task(name="always-fails", ttl=10, max_attempts=3, retry_delay=0.3)
def always_fails(lease: RunningLease) -> None:
    """Fails every time, so the worker retries it until max_attempts."""
    lease.update({"attempt": lease.attempt})
    raise RuntimeError(f"attempt {lease.attempt} failed")


@background_task(name="kills-its-worker", ttl=1, resume=True, max_attempts=2)
def kills_its_worker(lease: RunningLease) -> None:
    """Dies as a segfault would, every time: attempts must run out."""
    lease.update({"attempt": lease.attempt})
    os._exit(139)


@background_task(name="ignores-stop", ttl=5, resume=True)
def ignores_stop(lease: RunningLease, seconds: float = 120) -> None:
    """Says it started (its pid, in its value), then sleeps without a
    ``check()``: a graceful stop never reaches it."""
    # A stop that comes as the value lands (update() writes, then looks at
    # the stop) is ignored, as it is for the rest of the run.
    with contextlib.suppress(WorkerStopping):
        lease.update({"pid": os.getpid()}, flush=True)
    time.sleep(seconds)


@background_task(name="times-out-checking", ttl=2, timeout=0.5)
def times_out_checking(lease: RunningLease, seconds: float = 20) -> str:
    """Checks every 20 ms for ``seconds``, far past its timeout."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lease.check()
        time.sleep(0.02)
    return "not timed out"


@background_task(name="times-out-silent", ttl=2, timeout=0.5, max_attempts=2, retry_delay=0.1)
def times_out_silent(lease: RunningLease, seconds: float = 3) -> str:
    """Sleeps ``seconds`` without a check, far past its timeout, then says so
    (its worker's log) and returns: an end that must come too late."""
    time.sleep(seconds)
    print(f"late {lease.token}", flush=True)
    return "late"
