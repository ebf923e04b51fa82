"""What every lease holder in this process shares (core/holding.py,
``Holder``), through its two kinds, a ``RunningLease`` here: who holds it,
what its heartbeat brings (an operator's cancel, a takeover, the worker's
stop, a run past its timeout) and what ``check()`` raises for each, and the
renew deadline, on this process's clock: a holder not renewed within its
ttl gives its lease up, whatever the database says."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_bgtasks import LeaseLost, TaskCancelled, lease
from django_bgtasks.core.holding import Holder
from django_bgtasks.core.runner import RunningLease
from django_bgtasks.core.states import Lease
from django_bgtasks.exceptions import TaskTimedOut, WorkerStopping
from django_bgtasks.models import BackgroundTask
from django_bgtasks.signals import lease_lost
from tests.dbtools import backdate, runs

objects = BackgroundTask.objects


def test_a_running_lease_shows_who_holds_it_and_a_cancel_request(db_alias: str) -> None:
    with pytest.raises(TaskCancelled), lease("job", ttl=30) as running:
        assert (
            repr(running) == f"<RunningLease 'job' token={running.token} owner={running.owner!r}>"
        )
        assert (running.name, running.ttl, running.cancel_requested) == ("job", 30, False)
        objects.request_cancel("job")
        running.update({"done": 1})  # the renewal brings the request
    assert running.cancel_requested


def test_a_stolen_lease_is_noticed_by_the_heartbeat_and_never_released(db_alias: str) -> None:
    lost: list[dict[str, Any]] = []
    lease_lost.connect(lambda **kw: lost.append(kw), weak=False, dispatch_uid="t-lost")
    try:
        with (
            pytest.raises(LeaseLost, match="taken over or released by an operator"),
            lease("cleanup", ttl=0.9) as running,
        ):
            backdate(db_alias, "cleanup", 5)
            thief = objects.try_claim("cleanup", "thief", {"by": "thief"}, ttl=30)
            assert thief is not None
            deadline = time.monotonic() + 2
            while not running.lost and time.monotonic() < deadline:
                time.sleep(0.05)
            running.check()
    finally:
        lease_lost.disconnect(dispatch_uid="t-lost")

    state = objects.get_state("cleanup")
    assert (state.owner, state.running, state.value) == ("thief", True, {"by": "thief"})
    assert lost and lost[0]["token"] == running.token
    [run] = runs(db_alias)  # recorded lost by the thief's claim, not released
    assert run["outcome"] == "lost"


def test_a_holder_not_renewed_within_its_ttl_gives_its_lease_up(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The deadline counts from when the claim, then the last renewal, was
    sent: a renewal moves it on; none for a ttl, and the holder gives the
    lease up, on its own clock (here no heartbeat renews it). The ttl is
    long enough for the claim, a renewal and a check on a loaded machine."""
    claimed = objects.try_claim("h-deadline", "holder", ttl=3.0)
    assert claimed is not None
    running = RunningLease(claimed)
    assert isinstance(running, Holder)
    before = time.monotonic()
    # (remaining() read last: the sum is the deadline or a hair earlier)
    assert time.monotonic() + running.remaining() < before + 3.0
    running.renew_now()
    # (remaining() read first: the sum is the deadline or a hair later)
    assert running.remaining() + time.monotonic() >= before + 3.0  # sent after ``before``
    assert not running.lost
    running.check()
    time.sleep(max(running.remaining(), 0.0) + 0.05)
    assert running.lost
    with pytest.raises(LeaseLost, match=r"not renewed within the ttl \(3 s\)"):
        running.check()
    [record] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert record.getMessage() == (
        f"lease 'h-deadline' (token {claimed.token}) lost: not renewed within the ttl (3 s): "
        "the database was unreachable or this process was paused"
    )
    # Given up here alone: the row still names the holder, until its ttl there.
    state = objects.get_state("h-deadline")
    assert state is not None and state.owner == "holder"


def _holder(ttl: float = 30.0, **options: Any) -> RunningLease:
    """A holder of a lease claimed just now, no heartbeat started: what it is
    told comes from the test, as from its worker's renewer."""
    return RunningLease(Lease("h-told", "holder", 1, ttl), **options)


def test_what_a_renewal_brings_is_what_check_raises_and_a_timeout_comes_first() -> None:
    stopping = threading.Event()
    running = _holder(stopping=stopping)
    running.timeout = 10.0
    assert running.timeout_due(4.0, grace=5.0) == 6.0  # its timeout, then
    running.renewed(time.monotonic(), cancel_requested=False, age=9.5)
    assert not (running.timed_out or running.cancel_requested or running.stopping)
    running.check()
    stopping.set()
    with pytest.raises(WorkerStopping):
        running.check()
    running.renewed(time.monotonic(), cancel_requested=True, age=9.9)
    with pytest.raises(TaskCancelled) as cancelled:
        running.check()
    assert type(cancelled.value) is TaskCancelled and running.cancel_requested
    running.renewed(time.monotonic(), cancel_requested=False, age=10.0)
    assert running.timed_out and running.cancel_requested  # (told once: it stays)
    with pytest.raises(TaskTimedOut):
        running.check()
    # Past its timeout: the grace after it, then its worker ends it.
    assert running.timeout_due(12.0, grace=5.0) == 3.0
    assert running.timeout_due(20.0, grace=5.0) == 0.0
    assert _holder().timeout_due(1000.0, grace=5.0) is None  # no timeout: never


def test_a_late_answer_never_moves_the_deadline_back() -> None:
    running = _holder(ttl=30.0)
    earlier = time.monotonic()
    time.sleep(0.05)
    later = time.monotonic()
    running.renewed(later, cancel_requested=False)
    running.renewed(earlier, cancel_requested=False)  # an earlier renewal's answer, late
    assert running.remaining() + time.monotonic() >= later + 30.0
