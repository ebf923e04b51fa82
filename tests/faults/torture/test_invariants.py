"""The torture run's checks must be able to fail: a small, hand-made run that
passes them, and one broken copy of it per invariant that must be caught.
(No database: this tests the checker, not the lease.)"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from tests.faults.torture.invariants import Evidence, check

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def entry(id: int, owner: str, token: int, began: float) -> dict[str, Any]:
    return {
        "id": id,
        "counter": "job",
        "owner": owner,
        "token": token,
        "value": id,
        "began_at": at(began),
        "ended_at": at(began + 0.01),
    }


def run(
    token: int, owner: str, outcome: str, finished: float, error: str = "", started: float = 0.0
) -> dict[str, Any]:
    return {
        "name": "job",
        "token": token,
        "owner": owner,
        "outcome": outcome,
        "error": error,
        "started_at": at(started),
        "finished_at": at(finished),
    }


def clean() -> Evidence:
    """A run in which everything held: A finishes token 1; B is paused
    holding token 2 and A takes over; token 3 (A) is force-released; C is
    killed holding token 4 and its lease expires."""
    return Evidence(
        ttl=1.0,
        ledger=[entry(1, "A", 1, 0.1), entry(2, "A", 1, 0.2), entry(3, "B", 2, 1.0)],
        counter=3,
        history=[
            run(1, "A", "succeeded", 0.5, started=0.0),
            run(2, "B", "lost", 1.1, "lease expired; taken over by A", started=0.6),
            run(3, "A", "released-by-operator", 4.0, started=1.2),
            run(4, "C", "lost", 5.0, "lease expired: no heartbeat within the ttl", started=4.1),
        ],
        last_token=4,
        still_running=[],
        journals={
            "A": [
                {"e": "start", "owner": "A"},
                {"e": "claim", "token": 1},
                {"e": "try", "token": 1, "value": 1, "fence_called": 1.0},
                {"e": "ok", "token": 1, "value": 1},
                {"e": "try", "token": 1, "value": 2, "fence_called": 2.0},
                {"e": "ok", "token": 1, "value": 2},
                {"e": "body_end", "token": 1, "how": "succeeded"},
                {"e": "released", "token": 1, "outcome": "succeeded"},
                {"e": "claim", "token": 3},
                {"e": "lost", "token": 3, "reason": "released by an operator"},
                {"e": "late", "token": 3, "accepted": False, "fence_called": 4.5},
            ],
            "B": [
                {"e": "start", "owner": "B"},
                {"e": "claim", "token": 2},
                {"e": "try", "token": 2, "value": 3, "fence_called": 10.0},
                {"e": "ok", "token": 2, "value": 3, "t": 10.1},
                {"e": "lost", "token": 2, "reason": "not renewed within the ttl"},
                {"e": "refused", "token": 2, "by": "runner"},
                {"e": "late", "token": 2, "accepted": False, "fence_called": 12.8},
            ],
            "C": [{"e": "start", "owner": "C"}, {"e": "claim", "token": 4}],
        },
        events=[
            {
                "kind": "pause",
                "owner": "B",
                "token": 2,
                "settled": True,
                "stopped_at": at(1.05).isoformat(),
                "stopped_mono": 10.5,
                "seconds": 2.0,
            },
            {
                "kind": "release",
                "returncode": 0,
                "done": True,
            },
            {
                "kind": "kill",
                "owner": "C",
                "token": 4,
                "sessions_ended": True,
                "still_running_after_ttl": False,
            },
            {
                "kind": "restart",
                "owner": None,
                "token": None,
                "outage": 1.5,
                "stopped_at": at(6.5).isoformat(),
                "up_at": at(6.6).isoformat(),
            },
        ],
    )


def test_the_clean_run_passes() -> None:
    verdict = check(clean())
    assert (verdict.violations, verdict.inconclusive) == ([], [])
    assert verdict.counts["claims (tokens handed out)"] == 4
    assert "| **violations (must be 0)** | **0** |" in verdict.table()


def overlap(e: Evidence) -> None:
    e.ledger[1]["began_at"] = at(0.105)


def token_goes_back(e: Evidence) -> None:
    e.ledger[1]["token"] = 2
    e.ledger[2]["token"] = 1


def wrong_owner(e: Evidence) -> None:
    e.ledger[2]["owner"] = "A"
    e.journals["A"].append({"e": "ok", "token": 2, "value": 3})


def lost_increment(e: Evidence) -> None:
    e.counter = 4


def acknowledged_but_missing(e: Evidence) -> None:
    del e.ledger[2]
    e.counter = 2


def unacknowledged_entry(e: Evidence) -> None:
    e.journals["B"] = [x for x in e.journals["B"] if x["e"] not in ("try", "ok")]


def paused_never_told(e: Evidence) -> None:
    e.journals["B"] = [x for x in e.journals["B"] if x["e"] != "lost"]


def paused_late_fence_accepted(e: Evidence) -> None:
    e.journals["B"][-1]["accepted"] = True


def write_after_pause(e: Evidence) -> None:
    e.journals["B"][2]["fence_called"] = 12.6


def dead_holder_still_running(e: Evidence) -> None:
    e.events[2]["still_running_after_ttl"] = True


def running_after_the_end(e: Evidence) -> None:
    e.still_running = ["job"]


def missing_run(e: Evidence) -> None:
    del e.history[3]


def untrue_outcome(e: Evidence) -> None:
    e.history[0]["outcome"] = "failed"


def lost_but_holder_finished(e: Evidence) -> None:
    e.history[3]["owner"] = "A"
    e.journals["A"].append({"e": "claim", "token": 4})


def uncounted_force_release(e: Evidence) -> None:
    e.events[1]["done"] = False


def restart_holder_kept_going(e: Evidence) -> None:
    # A's run (token 3) was open across the outage, and A was never told.
    e.events[3].update(stopped_at=at(2.2).isoformat(), up_at=at(2.5).isoformat())
    e.journals["A"] = [x for x in e.journals["A"] if x["e"] != "lost"]


def restart_lost_run_holder_kept_going(e: Evidence) -> None:
    # B's run (token 2, recorded lost as of its heartbeat at 1.1) was still
    # live when the server stopped at 1.5, and B was never told.
    e.events[3].update(stopped_at=at(1.5).isoformat(), up_at=at(1.6).isoformat())
    e.journals["B"] = [x for x in e.journals["B"] if x["e"] != "lost"]


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (overlap, "fenced transactions overlap"),
        (token_goes_back, "token went back"),
        (wrong_owner, "ledger entry by A with token 2"),
        (lost_increment, "counter is 4"),
        (acknowledged_but_missing, "not in the ledger"),
        (unacknowledged_entry, "no worker committed"),
        (paused_never_told, "never told LeaseLost"),
        (paused_late_fence_accepted, "accepted a paused holder's late fence"),
        (write_after_pause, "began after its holder's pause"),
        (dead_holder_still_running, "still read as running a ttl later"),
        (running_after_the_end, "after every worker stopped"),
        (missing_run, "missing [4]"),
        (untrue_outcome, "released as succeeded, recorded as failed"),
        (lost_but_holder_finished, "neither lost it nor died"),
        (uncounted_force_release, "0 forced releases succeeded"),
        (restart_holder_kept_going, "cut off by the restart never gave the lease up"),
        (restart_lost_run_holder_kept_going, "token 2 of B"),
    ],
)
def test_each_broken_invariant_is_caught(
    breakage: Callable[[Evidence], None], message: str
) -> None:
    evidence = copy.deepcopy(clean())
    breakage(evidence)
    verdict = check(evidence)
    assert any(message in violation for violation in verdict.violations), verdict.violations


def test_an_unsettled_pause_is_inconclusive() -> None:
    evidence = clean()
    evidence.events[0]["settled"] = False
    assert "never settled" in check(evidence).inconclusive[0]


def test_a_write_fenced_before_a_pause_may_commit_after_it() -> None:
    # The lease row stayed locked through the pause: nobody else could write.
    evidence = clean()
    evidence.journals["B"][3]["t"] = 12.7
    verdict = check(evidence)
    assert verdict.violations == []
    assert verdict.counts["of which fenced before a pause, committed after it"] == 1


def test_a_late_fence_accepted_before_a_pause_is_not_a_violation() -> None:
    # B's runner gave up at its deadline while the database still counted
    # the lease as live; its zombie fence was accepted, and then the chaos
    # process paused B, whose token the lease row still showed.
    evidence = clean()
    evidence.journals["B"][-1].update(accepted=True, fence_called=10.2)
    verdict = check(evidence)
    assert verdict.violations == []
    assert verdict.counts["late fences by a lost holder the database still accepted"] == 1


def test_a_restart_passes_when_the_run_it_cut_off_was_given_up() -> None:
    # A's token 3 spanned the outage and A was told LeaseLost. The event names
    # token 1, read a moment before the stop, which A released in between:
    # history, not that reading, decides (a soak run once tripped on it).
    evidence = clean()
    evidence.events[3].update(
        owner="A", token=1, stopped_at=at(2.2).isoformat(), up_at=at(2.5).isoformat()
    )
    verdict = check(evidence)
    assert verdict.violations == []
    assert verdict.counts["runs open across a restart, holder alive (each told LeaseLost)"] == 1
    # Stopped at 1.5: B's lost run (last heartbeat 1.1) was still live then, and counts too.
    evidence.events[3].update(stopped_at=at(1.5).isoformat(), up_at=at(1.6).isoformat())
    verdict = check(evidence)
    assert verdict.violations == []
    assert verdict.counts["runs open across a restart, holder alive (each told LeaseLost)"] == 2


def test_a_refused_operator_command_is_an_answer_and_a_crashed_one_is_not() -> None:
    evidence = clean()
    evidence.events.append({"kind": "release", "returncode": 1, "done": False})
    assert (check(evidence).violations, check(evidence).inconclusive) == ([], [])
    evidence.events.append({"kind": "cancel", "returncode": 1, "done": None})
    assert "operator command failed" in check(evidence).inconclusive[0]
