"""Races between real processes, with the invariant checked at the end."""

from __future__ import annotations

import pytest

from django_bgtasks.models import BackgroundTask
from tests.dbtools import rows, runs
from tests.procs import Worker, start_together

PROCESSES = 8
NAMES = 120


def test_eight_processes_racing_for_each_name_get_exactly_one_winner(db_alias: str) -> None:
    workers = [Worker(db_alias, "race", "job", NAMES, f"w{i}") for i in range(PROCESSES)]
    try:
        start_together(workers)
        results = {f"w{i}": worker.result() for i, worker in enumerate(workers)}
    finally:
        for worker in workers:
            worker.kill()

    winners: dict[str, list[str]] = {}
    for owner, result in results.items():
        for name, token in result["won"].items():
            assert token == 1
            winners.setdefault(name, []).append(owner)
    assert sorted(winners) == sorted(f"job-{i}" for i in range(NAMES))
    assert all(len(owners) == 1 for owners in winners.values()), winners
    # The database agrees with what each winner was told.
    table = {row["name"]: row for row in rows(db_alias)}
    for name, [owner] in winners.items():
        assert (table[name]["owner"], table[name]["token"], table[name]["value"]) == (
            owner,
            1,
            {"by": owner},
        )
    # The race was real: every process was claiming while every other was.
    # (Who wins is up to the scheduler; on SQLite one process often takes a
    # whole run of names while the others wait for the write lock.)
    assert max(r["began"] for r in results.values()) < min(r["ended"] for r in results.values())


@pytest.mark.parametrize("ttl", [0.2])
def test_a_takeover_storm_never_hands_out_a_token_twice(db_alias: str, ttl: float) -> None:
    workers = [Worker(db_alias, "storm", "hot", ttl, 4, f"w{i}") for i in range(PROCESSES)]
    try:
        start_together(workers)
        results = [worker.result() for worker in workers]
    finally:
        for worker in workers:
            worker.kill()

    claims = [token for result in results for token in result["claims"]]
    for result in results:  # each process saw its own tokens rise
        assert result["claims"] == sorted(set(result["claims"]))
    # Every claim got a distinct token, and they are exactly 1..N: a token
    # changes only on a successful claim, by one.
    assert sorted(claims) == list(range(1, len(claims) + 1))
    assert len(claims) > 15, "the storm was too calm to prove anything"
    takeovers_by_others = sum(
        1 for a, b in zip(sorted(claims), sorted(claims)[1:], strict=False) if b == a + 1
    )
    assert takeovers_by_others > 0
    state = BackgroundTask.objects.get_state("hot")
    assert state.token == len(claims)
    # Every run but the current one is in history exactly once, with a true
    # outcome: released by its holder, or lost when taken over while silent.
    released = {token for result in results for token in result["released"]}
    history = runs(db_alias, "hot")
    recorded = {run["token"]: run["outcome"] for run in history}
    assert len(history) == len(recorded)
    [row] = rows(db_alias)
    ended = set(range(1, state.token + 1)) - ({state.token} if row["running"] else set())
    assert set(recorded) == ended
    for token, outcome in recorded.items():
        assert outcome == ("succeeded" if token in released else "lost"), (token, outcome)
